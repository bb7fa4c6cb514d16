package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/roomhub/messaging-api/client"
)

// The pull API's bounds.
const (
	maxPullMessages = 100
	maxPullWait     = 30 * time.Second
)

// settleTimeout bounds an ack or nack, which is sent even after Ctrl-C so
// that what was printed is not delivered again.
const settleTimeout = 10 * time.Second

func (a *cli) listenCommand() *cobra.Command {
	var (
		maxMessages, count int
		wait               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "listen ROOM SUBSCRIPTION",
		Short: "Pull a PULL subscription's messages and print each, acking it, until Ctrl-C",
		Long: `Pull a PULL subscription in a loop (long polls of --wait) and print each message: with
-o json one JSON object per line, as the API gave it (ackId, eventId, correlationId,
eventType, eventTypeVersion, attempt, publishedAt, attributes, payload, ackDeadline);
else a readable form. Each message is acked once it is printed; one that could not
be printed (a closed pipe, say) is nacked, and so are the others of its pull, so that
they are delivered again. Runs until Ctrl-C, or --count messages.

A pull that fails because the service is unreachable or unavailable (5xx) is tried
again, backing off up to 30s; any other refusal (a PUSH, PAUSED or unknown
subscription) ends the command.`,
		Example: `  roomctl listen orders 0190…
  roomctl listen orders 0190… -o json --count 10 > messages.jsonl`,
		Args: exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if maxMessages < 1 || maxMessages > maxPullMessages {
				return usagef("--max-messages must be from 1 to %d", maxPullMessages)
			}
			if wait < 0 || wait > maxPullWait {
				return usagef("--wait must be from 0 to %v", maxPullWait)
			}
			if count < 0 {
				return usagef("--count must not be negative")
			}
			id, err := parseID("SUBSCRIPTION", args[1])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			l := listener{a: a, c: c, room: args[0], sub: id, max: maxMessages, wait: wait, count: count}
			return l.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.IntVar(&maxMessages, "max-messages", 10, "the most messages one pull takes (1 to 100)")
	f.DurationVar(&wait, "wait", 20*time.Second, "how long one pull waits for a first message (0 to 30s)")
	f.IntVar(&count, "count", 0, "stop after this many messages (0: until Ctrl-C)")
	return cmd
}

// listener pulls one subscription.
type listener struct {
	a          *cli
	c          *client.ClientWithResponses
	room       string
	sub        uuid.UUID
	max, count int
	wait       time.Duration
	printed    int
}

// pulled is a pulled message: as the API gave it, and decoded.
type pulled struct {
	raw json.RawMessage
	msg client.PulledMessage
}

func (l *listener) run(ctx context.Context) error {
	backoff := time.Second
	for l.count == 0 || l.printed < l.count {
		n := l.max
		if l.count > 0 {
			n = min(n, l.count-l.printed)
		}
		msgs, err := l.pull(ctx, n)
		if stopped(ctx) {
			return nil // Ctrl-C: whatever the pull leased comes again after its ack deadline
		}
		if err != nil {
			if !transient(err) {
				return err
			}
			fmt.Fprintf(l.a.err, "roomctl: pull failed (%v); trying again in %v\n", err, backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if err := l.printAndSettle(msgs); err != nil {
			return err
		}
	}
	return nil
}

// stopped tells whether ctx is done (Ctrl-C).
func stopped(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// transient tells a failed request worth trying again: no answer, or a
// 5xx.
func transient(err error) bool {
	var gone unreachableError
	var api apiError
	return errors.As(err, &gone) || errors.As(err, &api) && api.problem.Status >= 500
}

// pull takes up to n messages.
func (l *listener) pull(ctx context.Context, n int) ([]pulled, error) {
	ctx, cancel := context.WithTimeout(ctx, l.a.timeout+l.wait)
	defer cancel()
	maxMessages, waitMs := int32(n), l.wait.Milliseconds() //nolint:gosec // n ≤ maxPullMessages
	resp, err := l.c.PullWithResponse(ctx, l.room, l.sub, client.PullRequest{MaxMessages: &maxMessages, WaitMs: &waitMs})
	if err := l.a.check(resp, err); err != nil {
		return nil, err
	}
	var raw struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(resp.Body, &raw); err != nil || len(raw.Messages) != len(resp.JSON200.Messages) {
		return nil, fmt.Errorf("the pull answered %s", truncate(string(resp.Body), 200))
	}
	out := make([]pulled, len(raw.Messages))
	for i := range raw.Messages {
		out[i] = pulled{raw: raw.Messages[i], msg: resp.JSON200.Messages[i]}
	}
	return out, nil
}

// printAndSettle prints msgs, acks those printed and nacks the others.
func (l *listener) printAndSettle(msgs []pulled) error {
	var printErr error
	done := 0
	for _, m := range msgs {
		if printErr = l.print(m); printErr != nil {
			break
		}
		done++
	}
	l.printed += done
	var ackErr, nackErr error
	if done > 0 {
		ackErr = l.settle("ack", msgs[:done])
	}
	if done < len(msgs) {
		nackErr = l.settle("nack", msgs[done:])
	}
	if printErr != nil {
		return errors.Join(fmt.Errorf("print: %w (%d message(s) nacked)", printErr, len(msgs)-done), nackErr, ackErr)
	}
	if ackErr != nil && transient(ackErr) {
		// Those messages come again after their ack deadline; listening
		// goes on.
		fmt.Fprintf(l.a.err, "roomctl: %v; the messages printed come again after their ack deadline\n", ackErr)
		return nil
	}
	return ackErr
}

// print writes one message.
func (l *listener) print(p pulled) error {
	if l.a.json() {
		_, err := fmt.Fprintf(l.a.out, "%s\n", p.raw)
		return err
	}
	m := p.msg
	_, err := fmt.Fprintf(l.a.out, "%s  %s v%d  attempt %d  event %s  correlation %s\n",
		cell(m.PublishedAt), m.EventType, m.EventTypeVersion, m.Attempt, m.EventId, m.CorrelationId)
	if err == nil && len(m.Attributes) > 0 {
		_, err = fmt.Fprintf(l.a.out, "  attributes %s\n", attributes(m.Attributes))
	}
	if err == nil {
		_, err = fmt.Fprintf(l.a.out, "  %s\n", m.Payload)
	}
	return err
}

// settle acks or nacks msgs, and reports those the service did not
// settle (their lease ended first: they come again).
func (l *listener) settle(op string, msgs []pulled) error {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.msg.AckId.String()
	}
	body := client.AckRequest{AckIds: ids}
	var (
		answer client.Answer
		err    error
		parse  func() *client.AckResults
	)
	if op == "ack" {
		resp, e := l.c.AckWithResponse(ctx, l.room, l.sub, body)
		answer, err, parse = resp, e, func() *client.AckResults { return resp.JSON200 }
	} else {
		resp, e := l.c.NackWithResponse(ctx, l.room, l.sub, body)
		answer, err, parse = resp, e, func() *client.AckResults { return resp.JSON200 }
	}
	if err := l.a.check(answer, err); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	want := op + "ed"
	for _, r := range parse().Results {
		if string(r.Status) != want {
			fmt.Fprintf(l.a.err, "roomctl: %s of %s: %s (its ack deadline passed: it comes again)\n", op, r.AckId, r.Status)
		}
	}
	return nil
}
