// Package pin pins nats.go v1.56.0: its go.work adds it to the nats
// module, and minimal version selection raises the nats module's nats.go
// to what this module requires.
package pin

import _ "github.com/nats-io/nats.go"
