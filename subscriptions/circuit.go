package subscriptions

import "time"

// CircuitState is where a PUSH subscription's circuit breaker stands.
type CircuitState string

const (
	// CircuitClosed: messages are delivered.
	CircuitClosed CircuitState = "closed"
	// CircuitOpen: messages are held, not attempted, until a probe is due.
	CircuitOpen CircuitState = "open"
	// CircuitHalfOpen: one message is on its way as the probe; the others
	// are held until it answers.
	CircuitHalfOpen CircuitState = "half-open"
)

// Circuit is a PUSH subscription's circuit, shared by every dispatcher
// process through the database.
type Circuit struct {
	State CircuitState
	// Version counts the circuit's changes. A change is stored only over the
	// version it was made from, so dispatchers never undo each other's.
	Version int64
	// OpenedAt is when the circuit last opened (zero while closed).
	OpenedAt time.Time
	// Cooldown is the wait before the next probe: the breaker's cool-down,
	// doubled by each failed probe up to its cap (0 while closed).
	Cooldown time.Duration
	// ProbeAt is, while open, when the next probe may go; while half-open,
	// until when the probe under way holds the circuit (after that, a
	// dispatcher that lost its probe's process may send another).
	ProbeAt time.Time
	// LastError and LastStatusCode (0: no answer) say why: the failure that
	// opened the circuit, or the last failed probe.
	LastError      string
	LastStatusCode int
}

// Closed reports whether deliveries go.
func (c Circuit) Closed() bool { return c.State == CircuitClosed || c.State == "" }
