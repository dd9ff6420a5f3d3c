//go:build !race

package main

// raceBuild is set when the tests are built with -race: the programs they
// run are built with it too.
const raceBuild = false
