package sample

const A, b = 1, 2

var V int

type T struct {
	X int
	y int
}

type u struct{ Z int }

func F() {}

func f() {}

func (T) M() {}

func (T) m() {}

func (u) N() {}
