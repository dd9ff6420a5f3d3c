// Package svcdata is the cache's service data and what is done to it
// without the cache's lock: immutable snapshots of a service, the copies
// made on the way in (from a registry answer or a watch event) and on the
// way out (to a GetService caller), the merging of watch events into the
// data held and their replay onto a refresh's answer, the prints that tell
// an event that repeats the data held, and the metadata maps that copies
// share.
//
// Nothing here takes a lock of the cache's, or can: the package cannot
// see the cache. Every function takes what it needs and returns new data,
// never changing what it was given, so that a snapshot stays immutable
// once the cache stores it; the one exception, a snapshot's confirmation
// time, says who may move it.
package svcdata
