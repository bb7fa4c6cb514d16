package broker

import (
	"bytes"
	"net"
	"testing"
)

// recordingConn records what is written to it.
type recordingConn struct {
	net.Conn
	buf bytes.Buffer
}

func (c *recordingConn) Write(p []byte) (int, error) { return c.buf.Write(p) }

func TestRawConnect(t *testing.T) {
	// go-stomp writes the CONNECT with escaped header values; split across
	// writes as a full bufio buffer would; a SEND follows in the last write.
	escaped := "CONNECT\naccept-version:1.1,1.2\nlogin:us\\cer\npasscode:p\\ca\\\\ss\n\n\x00"
	send := "SEND\ndestination:a\\cb\n\nbody\x00"
	for _, split := range []int{1, 9, len(escaped) - 1, len(escaped)} {
		rec := &recordingConn{}
		c := &rawConnect{Conn: rec}
		parts := []string{escaped[:split], escaped[split:] + send}
		for _, p := range parts {
			if n, err := c.Write([]byte(p)); err != nil || n != len(p) {
				t.Fatalf("Write(%q) = %d, %v", p, n, err)
			}
		}
		want := "CONNECT\naccept-version:1.1,1.2\nlogin:us:er\npasscode:p:a\\ss\n\n\x00" + send
		if got := rec.buf.String(); got != want {
			t.Errorf("split at %d: wrote\n%q\nwant\n%q", split, got, want)
		}
	}
}
