//go:build !schemastate_testhooks

package main

import "github.com/schemastate/schemastate/reconcile"

// testHooks is empty in every build but the tests' own (testhooks_on.go).
func testHooks() []reconcile.Option { return nil }
