package main

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/oapi-codegen/nullable"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/roomhub/messaging-api/client"
)

// maxReplay is the most dead letters one replay request takes.
const maxReplay = 500

func (a *cli) deadLettersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "dead-letters",
		Aliases: []string{"dead-letter", "dl"},
		Short:   "List, show, replay and delete a subscription's dead letters",
		Long: `A dead letter is a message of a subscription that will not be delivered by itself:
its attempts ran out, it failed for good, it expired, or the broker kept refusing it.
Replaying one publishes it again to its subscription, from attempt 1, as a new event.`,
		Args: noArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(a.deadLettersList(), a.deadLettersGet(), a.deadLettersReplay(), a.deadLettersDelete())
	return cmd
}

// deadLetterFilter is the filter flags of list and replay.
type deadLetterFilter struct {
	reason       *choice
	eventType    string
	since, until timeFlag
}

func (d *deadLetterFilter) flags(f *pflag.FlagSet) {
	d.reason = newChoice("", "attempts_exhausted", "permanent_failure", "expired", "broker_refused")
	d.since.now, d.until.now = time.Now, time.Now
	f.Var(d.reason, "reason", "only those of this reason")
	f.StringVar(&d.eventType, "event-type", "", "only those of this event type")
	f.Var(&d.since, "since", "only those dead-lettered at or after this time: RFC 3339, or a duration back from now (90m)")
	f.Var(&d.until, "until", "only those dead-lettered before this time: RFC 3339, or a duration back from now")
}

func (d *deadLetterFilter) given() bool {
	return d.reason.value != "" || d.eventType != "" || !d.since.t.IsZero() || !d.until.t.IsZero()
}

func (a *cli) deadLettersList() *cobra.Command {
	var (
		p page
		d deadLetterFilter
	)
	cmd := &cobra.Command{
		Use:     "list ROOM SUBSCRIPTION",
		Short:   "List a subscription's dead letters, oldest first",
		Example: "  roomctl dead-letters list orders 0190… --reason expired --since 12h",
		Args:    exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: send(a, onSub(func(r req, room string, id uuid.UUID) (*client.ListDeadLettersResponse, error) {
			limit, cursor := p.params()
			params := &client.ListDeadLettersParams{Limit: limit, Cursor: cursor, Since: d.since.ptr(), Until: d.until.ptr()}
			if d.reason.value != "" {
				v := client.DeadLetterReason(d.reason.value)
				params.Reason = &v
			}
			if d.eventType != "" {
				params.EventType = &d.eventType
			}
			return r.c.ListDeadLettersWithResponse(r.ctx, room, id, params)
		}), func(t *table, resp *client.ListDeadLettersResponse) {
			t.row("ID", "EVENT TYPE", "REASON", "ATTEMPTS", "LAST STATUS", "LAST ERROR", "DEAD-LETTERED", "CORRELATION ID")
			for _, l := range resp.JSON200.Items {
				t.row(l.Id, fmt.Sprintf("%s v%d", l.EventType, l.EventTypeVersion), l.Reason, l.Attempts,
					orNull(l.LastStatusCode, str), truncate(l.LastError, 60), l.DeadLetteredAt, l.CorrelationId)
			}
			t.nextPage(resp.JSON200.NextCursor)
		}),
	}
	p.flags(cmd.Flags(), 50, 500)
	d.flags(cmd.Flags())
	return cmd
}

// onDeadLetter is a call on the dead letter of the arguments ROOM
// SUBSCRIPTION DEAD-LETTER.
func onDeadLetter[R any](f func(r req, room string, sub, id uuid.UUID) (R, error)) func(req) (R, error) {
	return onSub(func(r req, room string, sub uuid.UUID) (R, error) {
		id, err := parseID("DEAD-LETTER", r.args[2])
		if err != nil {
			var none R
			return none, err
		}
		return f(r, room, sub, id)
	})
}

func (a *cli) deadLettersGet() *cobra.Command {
	return &cobra.Command{
		Use:   "get ROOM SUBSCRIPTION DEAD-LETTER",
		Short: "Show a dead letter with its payload",
		Args:  exactArgs("ROOM", "SUBSCRIPTION", "DEAD-LETTER"),
		RunE: send(a, onDeadLetter(func(r req, room string, sub, id uuid.UUID) (*client.GetDeadLetterResponse, error) {
			return r.c.GetDeadLetterWithResponse(r.ctx, room, sub, id)
		}), func(t *table, resp *client.GetDeadLetterResponse) {
			l := resp.JSON200
			t.row("ID", l.Id)
			t.row("SUBSCRIPTION", l.SubscriptionId)
			t.row("EVENT ID", l.EventId)
			t.row("CORRELATION ID", l.CorrelationId)
			t.row("EVENT TYPE", fmt.Sprintf("%s v%d", l.EventType, l.EventTypeVersion))
			t.row("REASON", l.Reason)
			t.row("ATTEMPTS", l.Attempts)
			t.row("LAST STATUS", orNull(l.LastStatusCode, str))
			t.row("LAST ERROR", l.LastError)
			t.row("PUBLISHED", l.PublishedAt)
			t.row("DEAD-LETTERED", l.DeadLetteredAt)
			t.row("ATTRIBUTES", attributes(l.Attributes))
			t.row("PAYLOAD", string(l.Payload))
		}),
	}
}

func (a *cli) deadLettersDelete() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ROOM SUBSCRIPTION DEAD-LETTER",
		Short: "Discard a dead letter without delivering it",
		Args:  exactArgs("ROOM", "SUBSCRIPTION", "DEAD-LETTER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(a, onDeadLetter(func(r req, room string, sub, id uuid.UUID) (*client.DeleteDeadLetterResponse, error) {
				return r.c.DeleteDeadLetterWithResponse(r.ctx, room, sub, id)
			}), done[*client.DeleteDeadLetterResponse]("deleted dead letter "+args[2]))(cmd, args)
		},
	}
}

func (a *cli) deadLettersReplay() *cobra.Command {
	var (
		d   deadLetterFilter
		all bool
	)
	cmd := &cobra.Command{
		Use:   "replay ROOM SUBSCRIPTION [DEAD-LETTER...]",
		Short: "Publish dead letters again, by id, or by filter and time range",
		Long: `Publish dead letters again to their subscription, from attempt 1, each as a new event
(same payload, type, version, correlation id and attributes); each dead letter is
deleted as it is replayed.

Name them by id (up to 500, replayed all or none), or by filter (--reason,
--event-type, --since, --until), or all of them (--all). A filter or --all replays
every dead letter that matches and was dead-lettered before the command started
(--until, if earlier), 500 per request, so that those the replays make again are
not replayed in turn. With -o json each request's answer is a line.`,
		Example: `  roomctl dead-letters replay orders 0190… 0190b5b0-0000-7000-8000-000000000001
  roomctl dead-letters replay orders 0190… --reason expired --since 2026-01-02T22:00:00Z --until 2026-01-03T06:00:00Z
  roomctl dead-letters replay orders 0190… --all`,
		Args: minArgs(2, "ROOM SUBSCRIPTION [DEAD-LETTER...]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := make([]uuid.UUID, 0, len(args)-2)
			for _, arg := range args[2:] {
				id, err := parseID("DEAD-LETTER", arg)
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			switch {
			case len(ids) > 0 && (all || d.given()):
				return usagef("name dead letters by id, or by filter or --all, not both")
			case len(ids) > maxReplay:
				return usagef("at most %d dead letters by id at once", maxReplay)
			case len(ids) == 0 && !all && !d.given():
				return usagef("name the dead letters to replay: their ids, a filter (--reason, --event-type, --since, --until), or --all")
			}
			var body client.DeadLetterReplayRequest
			if len(ids) > 0 {
				body.Ids = nullable.NewNullableWithValue(ids)
			} else {
				if d.reason.value != "" {
					v := client.DeadLetterReplayRequestReason(d.reason.value)
					body.Reason = &v
				}
				if d.eventType != "" {
					body.EventType = &d.eventType
				}
				body.Since = d.since.ptr()
				until := time.Now().UTC()
				if u := d.until.ptr(); u != nil && u.Before(until) {
					until = *u
				}
				body.Until = &until
			}
			return a.replay(cmd, args, body, len(ids) == 0)
		},
	}
	d.flags(cmd.Flags())
	cmd.Flags().BoolVar(&all, "all", false, "replay every dead letter of the subscription")
	return cmd
}

// replay sends body, again while a filtered replay takes a full 500, and
// shows what was replayed.
func (a *cli) replay(cmd *cobra.Command, args []string, body client.DeadLetterReplayRequest, repeat bool) error {
	var replayed []client.ReplayedDeadLetter
	show := func() error {
		if a.json() || len(replayed) == 0 {
			return nil
		}
		t := newTable(a.out)
		t.row("DEAD LETTER", "NEW EVENT", "CORRELATION ID")
		for _, l := range replayed {
			t.row(l.DeadLetterId, l.EventId, l.CorrelationId)
		}
		return t.flush()
	}
	sub, err := parseID("SUBSCRIPTION", args[1])
	if err != nil {
		return err
	}
	for {
		c, ctx, cancel, err := a.call(cmd)
		if err != nil {
			return err
		}
		resp, err := c.ReplayDeadLettersWithResponse(ctx, args[0], sub, body)
		cancel()
		if err := a.check(resp, err); err != nil {
			if len(replayed) > 0 {
				_ = show()
				fmt.Fprintf(a.err, "replayed %d dead letters before this error\n", len(replayed))
			}
			return err
		}
		replayed = append(replayed, resp.JSON202.Replayed...)
		if a.json() {
			if err := a.writeJSON(resp.Body); err != nil {
				return err
			}
		}
		if !repeat || len(resp.JSON202.Replayed) < maxReplay {
			break
		}
	}
	if err := show(); err != nil {
		return err
	}
	fmt.Fprintf(a.err, "replayed %d dead letters\n", len(replayed))
	return nil
}
