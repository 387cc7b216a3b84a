// Package lua holds the queue's Redis scripts. Each state move of a job is one
// script file, embedded here so the binaries carry them and emq can run them
// EVALSHA-first.
package lua

import _ "embed"

// Admit writes a new job and puts it in its group's fair lane, or refuses it.
//
//go:embed admit.lua
var Admit string
