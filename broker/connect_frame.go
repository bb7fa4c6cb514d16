package broker

import (
	"bytes"
	"net"
	"strings"
	"sync"
)

// rawConnect undoes go-stomp's escaping of the CONNECT frame's headers. STOMP
// 1.2 says CONNECT and CONNECTED headers are not escaped, and Artemis and
// ActiveMQ Classic read them as written, so a login or passcode holding ':'
// or '\' reached the broker as "\c" or "\\" and the login failed. The first
// frame written on a connection is the CONNECT; it is held until its NUL
// terminator and written unescaped, and everything after passes through.
type rawConnect struct {
	net.Conn

	mu      sync.Mutex
	pending []byte
	done    bool
}

func (c *rawConnect) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return c.Conn.Write(p)
	}
	i := bytes.IndexByte(p, 0)
	if i < 0 {
		c.pending = append(c.pending, p...)
		return len(p), nil
	}
	out := unescapeConnect(append(c.pending, p[:i+1]...))
	c.pending, c.done = nil, true
	if _, err := c.Conn.Write(append(out, p[i+1:]...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// connectEscapes is go-stomp's header escaping, undone.
var connectEscapes = strings.NewReplacer(`\\`, `\`, `\c`, `:`, `\n`, "\n", `\r`, "\r")

// unescapeConnect returns frame with its header values unescaped (the command
// line, the blank line and the NUL are kept as they are).
func unescapeConnect(frame []byte) []byte {
	head, rest, ok := bytes.Cut(frame, []byte("\n\n"))
	if !ok {
		return frame
	}
	lines := strings.Split(string(head), "\n")
	for i := 1; i < len(lines); i++ {
		if k, v, ok := strings.Cut(lines[i], ":"); ok {
			lines[i] = k + ":" + connectEscapes.Replace(v)
		}
	}
	var b bytes.Buffer
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n\n")
	b.Write(rest)
	return b.Bytes()
}
