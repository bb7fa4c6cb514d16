package main

import (
	"context"
	"fmt"
	"time"
)

// faultRecord is one fault as it happened.
type faultRecord struct {
	Name     string  `json:"name"`
	At       float64 `json:"atSeconds"`       // since the load started
	Downtime float64 `json:"downtimeSeconds"` // from the kill to ready again
	Detail   string  `json:"detail"`
	Err      string  `json:"error,omitempty"`
	// PushStall and PullStall are the longest time each subscription went
	// without a delivery from the fault's start to the next fault's (or the
	// load's end): how long the fault held deliveries up.
	PushStall float64 `json:"pushStallSeconds"`
	PullStall float64 `json:"pullStallSeconds"`
	// AcceptStall is the longest time in the same span without a 202 to a
	// publish; SendStall without a send the broker confirmed to an API
	// process's outbox relay (its messaging_outbox_relayed_total{result="sent"}
	// rising, read every 100 ms): the outbox accepts while the broker is
	// away, the relay cannot send.
	AcceptStall float64 `json:"acceptStallSeconds"`
	SendStall   float64 `json:"sendStallSeconds"`
	// PushDuplicates and PullDuplicates count the receipts of a publish
	// already received that arrived from the fault's start to the next
	// fault's (the last fault: to the end of the drain).
	PushDuplicates int `json:"pushDuplicates"`
	PullDuplicates int `json:"pullDuplicates"`
	// BrokerGap (-ha) is how long no node of the pair answered STOMP: from the
	// kill to the other node's first answer (failover), from the other node's
	// last answer to the restarted node's first (fail-back).
	BrokerGap float64 `json:"brokerGapSeconds,omitempty"`
}

// burstSize is how many publishes the API kill sends at once to the process
// it kills.
const burstSize = 40

// fault is one step of the sequence: it breaks something and brings it back,
// and says what it did in rec (Detail, and BrokerGap for a failover).
type fault struct {
	name string
	do   func(ctx context.Context, round int, rec *faultRecord) error
}

// faults is the sequence a round runs, in order, with cfg.gap between steps.
func (s *suite) faults() []fault {
	return []fault{
		{"SIGKILL dispatcher", func(ctx context.Context, round int, rec *faultRecord) error {
			d := s.dispatchers[round%len(s.dispatchers)]
			pid := d.pid()
			if err := d.kill(); err != nil {
				return err
			}
			if err := sleep(ctx, time.Second); err != nil {
				return err
			}
			rec.Detail = fmt.Sprintf("%s pid %d killed, restarted after 1s", d.name, pid)
			return d.startReady(ctx)
		}},
		{"kill -9 broker", func(ctx context.Context, _ int, rec *faultRecord) error {
			pid := s.broker.proc.pid()
			if err := s.broker.proc.kill(); err != nil {
				return err
			}
			if err := sleep(ctx, 3*time.Second); err != nil {
				return err
			}
			start := time.Now()
			if err := s.broker.start(ctx); err != nil {
				return err
			}
			rec.Detail = fmt.Sprintf("%s pid %d killed, down 3s, then %s to answer STOMP", s.broker.name, pid, time.Since(start).Round(100*time.Millisecond))
			return nil
		}},
		{"restart PostgreSQL", func(ctx context.Context, _ int, rec *faultRecord) error {
			pid := s.pg.proc.pid()
			if err := s.pg.restart(ctx, 2*time.Second); err != nil {
				return err
			}
			rec.Detail = fmt.Sprintf("postmaster pid %d: fast shutdown, down 2s, started again", pid)
			return nil
		}},
		{"SIGKILL API mid-publish", func(ctx context.Context, round int, rec *faultRecord) error {
			// A burst on top of the load, and the kill as soon as some of
			// it is in flight: requests die being read, in the transaction,
			// after the commit, and while answering.
			i := round % len(s.apis)
			a := s.apis[i]
			s.pub.burst(i, burstSize)
			deadline := time.Now().Add(5 * time.Second)
			for a.inflight.Load() < burstSize/2 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
			pid, inflight := a.pid(), a.inflight.Load()
			if err := a.kill(); err != nil {
				return err
			}
			if err := sleep(ctx, time.Second); err != nil {
				return err
			}
			rec.Detail = fmt.Sprintf("%s pid %d killed with %d publishes in flight, restarted after 1s", a.name, pid, inflight)
			return a.startReady(ctx)
		}},
	}
}

// runFaults runs cfg.rounds rounds of the sequence, cfg.gap apart, starting
// cfg.gap after t0.
func (s *suite) runFaults(ctx context.Context, t0 time.Time) error {
	sequence := s.faults()
	if s.cfg.ha {
		sequence = s.haFaults()
	}
	for round := range s.cfg.rounds {
		for _, f := range sequence {
			if err := sleep(ctx, s.cfg.gap); err != nil {
				return err
			}
			start := time.Now()
			s.logf("fault: %s (round %d)", f.name, round+1)
			rec := faultRecord{Name: f.name, At: start.Sub(t0).Seconds()}
			err := f.do(ctx, round, &rec)
			rec.Downtime = time.Since(start).Seconds()
			if err != nil {
				rec.Err = err.Error()
			}
			s.mu.Lock()
			s.faultLog = append(s.faultLog, rec)
			s.mu.Unlock()
			if err != nil {
				return fmt.Errorf("fault %q: %w", f.name, err)
			}
			s.logf("fault: %s done in %.1fs: %s", f.name, rec.Downtime, rec.Detail)
		}
	}
	return nil
}
