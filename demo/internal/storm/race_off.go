//go:build !race

package storm

// raceBuild is set when the race detector is on (see oneAtATime).
const raceBuild = false
