// Package pin pins etcd's client of the 3.6 line: its go.work adds it to
// the etcd module, and minimal version selection raises the etcd module's
// client, and what that client needs, to what this module requires.
package pin

import _ "go.etcd.io/etcd/client/v3"
