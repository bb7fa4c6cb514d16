package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/roomhub/messaging-api/client"
)

func (a *cli) messagesCommand() *cobra.Command {
	var (
		p       page
		eventID string
	)
	cmd := &cobra.Command{
		Use:   "messages ROOM [CORRELATION-ID]",
		Short: "Show the timeline of the events with a correlation id: every send and attempt",
		Long: `Show the events of a room published with CORRELATION-ID (or one event, --event-id;
or the room's latest events, with neither), newest first, each with its deliveries:
per subscription, every send and resend with its attempt, status, HTTP status,
latency, scheduled delay and error. The times of an attempt come in this order:
CREATED (stored), SENT (the broker confirmed it; a retry's delay runs after),
STARTED (the push request began), COMPLETED.`,
		Example: `  roomctl messages orders checkout-42
  roomctl messages orders --event-id 0190b5aa-0000-7000-8000-000000000003 -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("%s takes ROOM [CORRELATION-ID], got %d argument(s)", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if eventID != "" && len(args) == 2 {
				return usagef("give a CORRELATION-ID or --event-id, not both")
			}
			c, ctx, cancel, err := a.call(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			if eventID != "" {
				id, err := uuid.Parse(eventID)
				if err != nil {
					return usagef("--event-id must be an event id (a UUID), not %q", eventID)
				}
				resp, err := c.GetMessageWithResponse(ctx, args[0], id)
				return a.showTimeline(resp, err, func() ([]client.Message, *string) {
					return []client.Message{*resp.JSON200}, nil
				})
			}
			limit, cursor := p.params()
			params := &client.ListMessagesParams{Limit: limit, Cursor: cursor}
			if len(args) == 2 {
				params.CorrelationId = &args[1]
			}
			resp, err := c.ListMessagesWithResponse(ctx, args[0], params)
			return a.showTimeline(resp, err, func() ([]client.Message, *string) {
				if len(resp.JSON200.Items) == 0 && len(args) == 2 {
					fmt.Fprintf(a.err, "no event with correlation id %q (events are purged once expired or past their retention)\n", args[1])
				}
				return resp.JSON200.Items, resp.JSON200.NextCursor
			})
		},
	}
	p.flags(cmd.Flags(), 50, 200)
	cmd.Flags().StringVar(&eventID, "event-id", "", "show this event (its eventId) instead")
	return cmd
}

// showTimeline shows events with their deliveries.
func (a *cli) showTimeline(resp client.Answer, err error, events func() ([]client.Message, *string)) error {
	if err := a.check(resp, err); err != nil {
		return err
	}
	if a.json() {
		return a.writeJSON(resp.GetBody())
	}
	items, next := events()
	for i, m := range items {
		if i > 0 {
			fmt.Fprintln(a.out)
		}
		if err := writeTimeline(a.out, m); err != nil {
			return err
		}
	}
	a.nextPage(next)
	return nil
}

// clock is a time of an attempt: time of day to the millisecond.
func clock(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05.000")
}

// writeTimeline writes one event and its deliveries.
func writeTimeline(w io.Writer, m client.Message) error {
	expires := "never"
	if v, err := m.ExpiresAt.Get(); err == nil {
		expires = cell(v)
	}
	fmt.Fprintf(w, "event %s  %s v%d  correlation %s\n", m.EventId, m.EventType, m.EventTypeVersion, m.CorrelationId)
	fmt.Fprintf(w, "  published %s, expires %s, %d destination(s)\n", cell(m.PublishedAt), expires, m.Destinations)
	if len(m.Attributes) > 0 {
		fmt.Fprintf(w, "  attributes %s\n", attributes(m.Attributes))
	}
	fmt.Fprintf(w, "  payload %s\n", truncate(string(m.Payload), 200))
	for _, d := range m.Deliveries {
		fmt.Fprintf(w, "  %s subscription %s (%s)\n", d.SubscriptionType, d.SubscriptionId, d.Destination)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "    ATTEMPT\tSTATUS\tCODE\tLATENCY\tDELAY\tCREATED\tSENT\tSTARTED\tCOMPLETED\tERROR")
		for _, at := range d.Attempts {
			code, latency := "-", "-"
			if v, err := at.StatusCode.Get(); err == nil {
				code = fmt.Sprint(v)
			}
			if at.Latency != nil {
				latency = ms(*at.Latency)
			}
			var sent, completed *time.Time
			if v, err := at.SentAt.Get(); err == nil {
				sent = &v
			}
			if v, err := at.CompletedAt.Get(); err == nil {
				completed = &v
			}
			errText := "-"
			if at.Error != nil && *at.Error != "" {
				errText = strings.Join(strings.Fields(*at.Error), " ")
			}
			fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", at.Attempt, at.Status, code, latency, ms(at.ScheduledDelay),
				clock(&at.CreatedAt), clock(sent), clock(at.RequestStartedAt), clock(completed), truncate(errText, 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
