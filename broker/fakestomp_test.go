package broker_test

import (
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/roomhub/messaging-api/api/apitest"
)

// fakeStomp is a STOMP 1.2 server of a few dozen lines that records every frame
// it receives. It answers CONNECT, receipts and DISCONNECT, replies to Artemis
// management requests, sends heart-beats, and lets a test push MESSAGE frames,
// drop connections and stop accepting new ones.
type fakeStomp struct {
	t    *testing.T
	addr string

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every recorded frame
	ln        net.Listener
	paused    bool
	conns     []*fakeConn
	frames    []recorded
	msgSeq    int
	mgmt      func(req *frame.Frame) (succeeded bool, result string) // management replies
	onSend    func(fc *fakeConn, f *frame.Frame) bool                // true: handled, no receipt
	onConnect func(f *frame.Frame) *frame.Frame                      // non-nil: answer instead of CONNECTED
}

type recorded struct {
	conn  int // index of the connection, in accept order
	frame *frame.Frame
}

type fakeConn struct {
	id int
	nc net.Conn
	wm sync.Mutex
	w  *frame.Writer
	// subscription id by destination
	subs   map[string]string
	closed bool
}

func newFakeStomp(t *testing.T) *fakeStomp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeStomp{t: t, addr: ln.Addr().String(), ln: ln, changed: make(chan struct{})}
	s.mgmt = func(*frame.Frame) (bool, string) { return true, "{}" }
	go s.accept(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *fakeStomp) accept(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.ln != ln || s.paused {
			// accepted just before pause: it must not survive it
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		fc := &fakeConn{id: len(s.conns), nc: nc, w: frame.NewWriter(nc), subs: make(map[string]string)}
		s.conns = append(s.conns, fc)
		s.mu.Unlock()
		go s.serve(fc)
	}
}

func (s *fakeStomp) write(fc *fakeConn, f *frame.Frame) {
	fc.wm.Lock()
	defer fc.wm.Unlock()
	_ = fc.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = fc.w.Write(f)
}

func (s *fakeStomp) serve(fc *fakeConn) {
	defer func() {
		s.mu.Lock()
		fc.closed = true
		s.mu.Unlock()
		_ = fc.nc.Close()
	}()
	r := frame.NewReader(fc.nc)
	done := make(chan struct{})
	defer close(done)
	for {
		f, err := r.Read()
		if err != nil {
			return
		}
		if f == nil {
			continue // heart-beat
		}
		if f.Command == frame.SUBSCRIBE { // before record: tests wait for the frame, then deliver
			s.mu.Lock()
			fc.subs[f.Header.Get(frame.Destination)] = f.Header.Get(frame.Id)
			s.mu.Unlock()
		}
		s.record(fc, f)
		switch f.Command {
		case frame.CONNECT, frame.STOMP:
			if s.onConnect != nil {
				if resp := s.onConnect(f); resp != nil {
					s.write(fc, resp)
					return
				}
			}
			s.write(fc, frame.New(frame.CONNECTED, frame.Version, "1.2", frame.HeartBeat, "500,0", frame.Server, "fake"))
			go func() { // heart-beats every 500ms, as announced
				tick := time.NewTicker(500 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						s.write(fc, nil)
					}
				}
			}()
		case frame.SEND:
			if s.onSend != nil && s.onSend(fc, f) {
				continue
			}
			s.receipt(fc, f)
			if f.Header.Get(frame.Destination) == "activemq.management" {
				s.replyManagement(fc, f)
			}
			continue
		case frame.DISCONNECT:
			s.receipt(fc, f)
			return
		}
		s.receipt(fc, f)
	}
}

func (s *fakeStomp) receipt(fc *fakeConn, f *frame.Frame) {
	if id, ok := f.Header.Contains(frame.Receipt); ok {
		s.write(fc, frame.New(frame.RECEIPT, frame.ReceiptId, id))
	}
}

func (s *fakeStomp) replyManagement(fc *fakeConn, req *frame.Frame) {
	replyTo := req.Header.Get("reply-to")
	s.mu.Lock()
	subID, ok := fc.subs[replyTo]
	mgmt := s.mgmt
	s.mu.Unlock()
	if !ok {
		return // no subscription for the reply: a real broker drops it too
	}
	succeeded, result := mgmt(req)
	if req.Header.Get("_AMQ_OperationName") == "listQueues" {
		succeeded, result = true, s.listQueues(req)
	}
	body, _ := json.Marshal([]string{result})
	s.deliverOn(fc, subID, replyTo, []string{
		"correlation-id", req.Header.Get("correlation-id"),
		"_AMQ_OperationSucceeded", strconv.FormatBool(succeeded),
	}, body)
}

// listQueues answers listQueues for the queue named in its filter with the
// address of the last createQueue of that name, as Artemis would.
func (s *fakeStomp) listQueues(req *frame.Frame) string {
	var params []json.RawMessage
	var filter struct{ Value string }
	if json.Unmarshal(req.Body, &params) != nil || len(params) == 0 {
		return "{}"
	}
	var raw string
	if json.Unmarshal(params[0], &raw) != nil || json.Unmarshal([]byte(raw), &filter) != nil {
		return "{}"
	}
	address := ""
	for _, r := range s.recorded() {
		if r.frame.Header.Get("_AMQ_OperationName") != "createQueue" {
			continue
		}
		var create []json.RawMessage
		var qc struct{ Name, Address string }
		if json.Unmarshal(r.frame.Body, &create) == nil && len(create) > 0 {
			var js string
			if json.Unmarshal(create[0], &js) == nil && json.Unmarshal([]byte(js), &qc) == nil && qc.Name == filter.Value {
				address = qc.Address
			}
		}
	}
	out, _ := json.Marshal(map[string]any{"data": []map[string]string{{"name": filter.Value, "address": address}}, "count": 1})
	return string(out)
}

func (s *fakeStomp) deliverOn(fc *fakeConn, subID, dest string, headers []string, body []byte) {
	s.mu.Lock()
	s.msgSeq++
	id := "fake-" + strconv.Itoa(s.msgSeq)
	s.mu.Unlock()
	f := frame.New(frame.MESSAGE, frame.Subscription, subID, frame.MessageId, id, frame.Ack, "ack-"+id,
		frame.Destination, dest, frame.ContentLength, strconv.Itoa(len(body)))
	for i := 0; i+1 < len(headers); i += 2 {
		f.Header.Add(headers[i], headers[i+1])
	}
	f.Body = body
	s.write(fc, f)
}

// deliver sends a MESSAGE to the newest connection subscribed to dest.
func (s *fakeStomp) deliver(dest string, headers []string, body []byte) {
	s.t.Helper()
	s.mu.Lock()
	var (
		fc    *fakeConn
		subID string
	)
	for i := len(s.conns) - 1; i >= 0 && fc == nil; i-- {
		if id, ok := s.conns[i].subs[dest]; ok && !s.conns[i].closed {
			fc, subID = s.conns[i], id
		}
	}
	s.mu.Unlock()
	if fc == nil {
		s.t.Fatalf("fake STOMP: nobody subscribed to %s", dest)
	}
	s.deliverOn(fc, subID, dest, headers, body)
}

func (s *fakeStomp) record(fc *fakeConn, f *frame.Frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frames = append(s.frames, recorded{conn: fc.id, frame: f.Clone()})
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFrame returns the first recorded frame after index from that matches, or
// fails the test after timeout.
func (s *fakeStomp) waitFrame(from int, timeout time.Duration, match func(recorded) bool) (recorded, int) {
	s.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		for i := from; i < len(s.frames); i++ {
			if match(s.frames[i]) {
				r := s.frames[i]
				s.mu.Unlock()
				return r, i
			}
		}
		from = len(s.frames)
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			s.t.Fatalf("fake STOMP: no matching frame within %s", timeout)
		}
	}
}

func (s *fakeStomp) recorded() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.frames...)
}

// dropConnections closes every open connection, as a broker crash would.
func (s *fakeStomp) dropConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fc := range s.conns {
		fc.closed = true
		_ = fc.nc.Close()
	}
}

// pause stops accepting connections and drops the open ones; resume listens again
// on the same address.
func (s *fakeStomp) pause() {
	s.mu.Lock()
	s.paused = true
	_ = s.ln.Close()
	s.mu.Unlock()
	s.dropConnections()
}

func (s *fakeStomp) resume() {
	s.t.Helper()
	var ln net.Listener
	// The port may linger briefly after Close.
	apitest.Eventually(s.t, "fake STOMP listening again on "+s.addr, func() bool {
		var err error
		ln, err = net.Listen("tcp", s.addr)
		return err == nil
	})
	s.mu.Lock()
	s.ln, s.paused = ln, false
	s.mu.Unlock()
	go s.accept(ln)
}

func (s *fakeStomp) stop() {
	s.pause()
}
