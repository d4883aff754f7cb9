package inner

type T struct {
	X, Y int
	z    int
}

func (T) M() {}

func (*T) N() {}

func (T) m() {}
