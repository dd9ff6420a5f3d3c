package integration

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"

	"golang.org/x/net/http2/hpack"
)

// grpcMeter counts what goes through a proxy between an etcd client and
// etcd: the gRPC requests the client sends, by method, and the bytes and
// watch events etcd sends back. It reads the HTTP/2 frames as they pass and
// forwards each one unchanged.
//
// A unary call (Range, Put, ...) is one request. A streaming call (Watch,
// LeaseKeepAlive) is one stream, counted apart, and a watch stream carries
// one WatchCreateRequest per watch the client opens, which is counted too:
// that is what a watch costs etcd. Only traffic that reached etcd is counted:
// when etcd is down, the proxy closes each connection before reading from it.
type grpcMeter struct {
	mu            sync.Mutex
	calls         map[string]int // streams opened, by method ("KV/Range")
	watchCreates  int            // WatchCreateRequests sent
	watchCancels  int            // WatchCancelRequests sent
	watchEvents   int            // events in the WatchResponses received
	watchMessages int            // WatchResponses received
	up, down      int64          // bytes from the client, and to it
	errs          []string       // frames the meter could not read
}

func newGRPCMeter() *grpcMeter { return &grpcMeter{calls: map[string]int{}} }

// meterSnapshot is what a meter has counted up to one moment.
type meterSnapshot struct {
	Calls         map[string]int
	WatchCreates  int
	WatchCancels  int
	WatchEvents   int
	WatchMessages int
	Up, Down      int64
	Errors        []string
}

func (m *grpcMeter) Snapshot() meterSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := meterSnapshot{
		Calls:         make(map[string]int, len(m.calls)),
		WatchCreates:  m.watchCreates,
		WatchCancels:  m.watchCancels,
		WatchEvents:   m.watchEvents,
		WatchMessages: m.watchMessages,
		Up:            m.up,
		Down:          m.down,
		Errors:        append([]string(nil), m.errs...),
	}
	for k, v := range m.calls {
		s.Calls[k] = v
	}
	return s
}

// Sub is what was counted between earlier and s.
func (s meterSnapshot) Sub(earlier meterSnapshot) meterSnapshot {
	d := meterSnapshot{
		Calls:         map[string]int{},
		WatchCreates:  s.WatchCreates - earlier.WatchCreates,
		WatchCancels:  s.WatchCancels - earlier.WatchCancels,
		WatchEvents:   s.WatchEvents - earlier.WatchEvents,
		WatchMessages: s.WatchMessages - earlier.WatchMessages,
		Up:            s.Up - earlier.Up,
		Down:          s.Down - earlier.Down,
		Errors:        s.Errors[len(earlier.Errors):],
	}
	for k, v := range s.Calls {
		if n := v - earlier.Calls[k]; n != 0 {
			d.Calls[k] = n
		}
	}
	return d
}

// Unary is the number of unary requests of method ("KV/Range").
func (s meterSnapshot) Unary(method string) int { return s.Calls[method] }

// Requests is every request: the unary calls, the streams opened and the
// watches created on them.
func (s meterSnapshot) Requests() int {
	n := s.WatchCreates
	for _, v := range s.Calls {
		n += v
	}
	return n
}

func (s meterSnapshot) String() string {
	var parts []string
	for k, v := range s.Calls {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return fmt.Sprintf("requests %d (%s; watch creates %d, cancels %d); from etcd: %d watch responses with %d events, %d bytes; to etcd %d bytes",
		s.Requests(), strings.Join(parts, ", "), s.WatchCreates, s.WatchCancels, s.WatchMessages, s.WatchEvents, s.Down, s.Up)
}

func (m *grpcMeter) fail(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errs) < 10 {
		m.errs = append(m.errs, fmt.Sprintf(format, args...))
	}
}

// HTTP/2 frame types and flags (RFC 9113, section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// meteredConn is the state of one proxied connection that both directions
// share: the method of each stream, by id.
type meteredConn struct {
	m       *grpcMeter
	mu      sync.Mutex
	methods map[uint32]string
}

// pipe forwards client to server and back until either side closes, reading
// the frames on the way.
func (m *grpcMeter) pipe(client, server net.Conn) {
	mc := &meteredConn{m: m, methods: map[uint32]string{}}
	done := make(chan struct{}, 2)
	go func() { mc.fromClient(client, server); done <- struct{}{} }()
	go func() { mc.fromServer(server, client); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
}

// frameReader reads HTTP/2 frames and writes each to w as it is read.
type frameReader struct {
	r     *bufio.Reader
	w     io.Writer
	count func(int)
	hdr   [9]byte
}

type frame struct {
	typ, flags byte
	stream     uint32
	payload    []byte
}

func (f *frameReader) next() (frame, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return frame{}, err
	}
	n := int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
	fr := frame{typ: f.hdr[3], flags: f.hdr[4], stream: binary.BigEndian.Uint32(f.hdr[5:9]) & 0x7fffffff}
	buf := make([]byte, 9+n)
	copy(buf, f.hdr[:])
	if _, err := io.ReadFull(f.r, buf[9:]); err != nil {
		return frame{}, err
	}
	if _, err := f.w.Write(buf); err != nil {
		return frame{}, err
	}
	f.count(len(buf))
	fr.payload = buf[9:]
	return fr, nil
}

// unpad strips the padding (and the priority fields of a HEADERS frame).
func (fr frame) unpad() ([]byte, error) {
	p := fr.payload
	pad := 0
	if fr.flags&flagPadded != 0 && (fr.typ == frameData || fr.typ == frameHeaders) {
		if len(p) < 1 {
			return nil, errors.New("short padded frame")
		}
		pad = int(p[0])
		p = p[1:]
	}
	if fr.typ == frameHeaders && fr.flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, errors.New("short priority fields")
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, errors.New("padding longer than the frame")
	}
	return p[:len(p)-pad], nil
}

func (mc *meteredConn) fromClient(client, server net.Conn) {
	m := mc.m
	r := bufio.NewReaderSize(client, 64<<10)
	preface := make([]byte, len(clientPreface))
	if _, err := io.ReadFull(r, preface); err != nil {
		return
	}
	if _, err := server.Write(preface); err != nil {
		return
	}
	m.addUp(len(preface))
	if string(preface) != clientPreface {
		m.fail("not an HTTP/2 client: %q", preface)
		n, _ := io.Copy(server, r)
		m.addUp(int(n))
		return
	}
	fr := &frameReader{r: r, w: server, count: m.addUp}
	dec := hpack.NewDecoder(4096, nil)
	dec.SetAllowedMaxDynamicTableSize(1 << 20)
	var block []byte // a header block being assembled
	var blockStream uint32
	msgs := map[uint32]*grpcMessages{}
	for {
		f, err := fr.next()
		if err != nil {
			return
		}
		switch f.typ {
		case frameHeaders, frameContinuation:
			p := f.payload
			if f.typ == frameHeaders {
				if p, err = f.unpad(); err != nil {
					m.fail("HEADERS: %v", err)
					continue
				}
				block, blockStream = block[:0], f.stream
			}
			block = append(block, p...)
			if f.flags&flagEndHeaders == 0 {
				continue
			}
			fields, err := dec.DecodeFull(block)
			if err != nil {
				m.fail("HPACK: %v", err)
				continue
			}
			for _, hf := range fields {
				if hf.Name == ":path" {
					method := strings.TrimPrefix(hf.Value, "/etcdserverpb.")
					mc.mu.Lock()
					mc.methods[blockStream] = method
					mc.mu.Unlock()
					m.mu.Lock()
					m.calls[method]++
					m.mu.Unlock()
				}
			}
		case frameData:
			if mc.method(f.stream) != "Watch/Watch" {
				continue
			}
			p, err := f.unpad()
			if err != nil {
				m.fail("DATA: %v", err)
				continue
			}
			g := msgs[f.stream]
			if g == nil {
				g = &grpcMessages{}
				msgs[f.stream] = g
			}
			g.add(p, func(msg []byte) {
				if len(msg) == 0 {
					return
				}
				// WatchRequest: a oneof of create_request (1),
				// cancel_request (2) and progress_request (3).
				m.mu.Lock()
				switch msg[0] {
				case 1<<3 | 2:
					m.watchCreates++
				case 2<<3 | 2:
					m.watchCancels++
				}
				m.mu.Unlock()
			})
			if f.flags&flagEndStream != 0 {
				delete(msgs, f.stream)
			}
		case frameRSTStream:
			delete(msgs, f.stream)
		}
	}
}

func (mc *meteredConn) fromServer(server, client net.Conn) {
	m := mc.m
	fr := &frameReader{r: bufio.NewReaderSize(server, 64<<10), w: client, count: m.addDown}
	msgs := map[uint32]*grpcMessages{}
	for {
		f, err := fr.next()
		if err != nil {
			return
		}
		switch f.typ {
		case frameData:
			if mc.method(f.stream) != "Watch/Watch" {
				continue
			}
			p, err := f.unpad()
			if err != nil {
				m.fail("DATA from etcd: %v", err)
				continue
			}
			g := msgs[f.stream]
			if g == nil {
				g = &grpcMessages{}
				msgs[f.stream] = g
			}
			g.add(p, func(msg []byte) {
				n, err := countField(msg, 11) // WatchResponse.events
				if err != nil {
					m.fail("WatchResponse: %v", err)
				}
				m.mu.Lock()
				m.watchMessages++
				m.watchEvents += n
				m.mu.Unlock()
			})
		case frameRSTStream:
			delete(msgs, f.stream)
		case frameHeaders:
			if f.flags&flagEndStream != 0 {
				delete(msgs, f.stream) // trailers
			}
		}
	}
}

func (mc *meteredConn) method(stream uint32) string {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.methods[stream]
}

func (m *grpcMeter) addUp(n int) {
	m.mu.Lock()
	m.up += int64(n)
	m.mu.Unlock()
}

func (m *grpcMeter) addDown(n int) {
	m.mu.Lock()
	m.down += int64(n)
	m.mu.Unlock()
}

// grpcMessages reassembles the length-prefixed gRPC messages of one stream
// from its DATA frames.
type grpcMessages struct{ buf []byte }

func (g *grpcMessages) add(p []byte, each func(msg []byte)) {
	g.buf = append(g.buf, p...)
	for len(g.buf) >= 5 {
		n := int(binary.BigEndian.Uint32(g.buf[1:5]))
		if len(g.buf) < 5+n {
			return
		}
		each(g.buf[5 : 5+n])
		g.buf = g.buf[5+n:]
	}
	if len(g.buf) == 0 {
		g.buf = nil
	}
}

// countField counts the occurrences of top-level field num in a protobuf
// message.
func countField(msg []byte, num uint64) (int, error) {
	n := 0
	for len(msg) > 0 {
		key, k := binary.Uvarint(msg)
		if k <= 0 {
			return n, errors.New("bad field key")
		}
		msg = msg[k:]
		var skip int
		switch key & 7 {
		case 0: // varint
			_, k := binary.Uvarint(msg)
			if k <= 0 {
				return n, errors.New("bad varint")
			}
			skip = k
		case 1: // 64-bit
			skip = 8
		case 2: // length-delimited
			l, k := binary.Uvarint(msg)
			if k <= 0 {
				return n, errors.New("bad length")
			}
			skip = k + int(l)
		case 5: // 32-bit
			skip = 4
		default:
			return n, fmt.Errorf("wire type %d", key&7)
		}
		if skip > len(msg) {
			return n, errors.New("field runs past the message")
		}
		if key>>3 == num {
			n++
		}
		msg = msg[skip:]
	}
	return n, nil
}
