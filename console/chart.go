package console

import (
	"fmt"
	"math"
	"time"

	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/retry"
)

// Charts are SVG drawn on the server: the templates place the shapes these
// types compute, so the page needs no script, and a table beside each chart
// gives the same numbers to whoever cannot see it.

// chart is a bar chart: bars on a shared value axis.
type chart struct {
	W, H    int
	Label   string // the accessible name
	Bars    []chartBar
	YTicks  []tick
	XTicks  []tick
	PlotX   float64 // left edge of the plot
	PlotY   float64 // the axis (bottom of the bars)
	PlotW   float64
	Caption string
}

type chartBar struct {
	X, Y, W, H float64
	Class      string
	Title      string
	// Whisker draws the range [Lo, Hi] (y coordinates) over the bar.
	Whisker bool
	Lo, Hi  float64
	WX      float64 // the whisker's x
}

type tick struct {
	X, Y  float64
	Label string
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// maxRetryBars bounds the bars of a retry schedule (a policy may allow a
// thousand attempts); the table lists them all.
const maxRetryBars = 60

// retryChart draws a retry schedule: one bar per retry, its height the
// delay before it, with the jitter's range as a whisker.
func retryChart(s retry.ScheduleResponse) chart {
	c := chart{W: 640, H: 230, PlotX: 64, PlotY: 196, PlotW: 566,
		Label: fmt.Sprintf("Retry schedule: %d attempts at most; delay before each retry", s.MaxAttempts)}
	attempts := s.Attempts
	if len(attempts) > maxRetryBars {
		attempts = attempts[:maxRetryBars]
		c.Caption = fmt.Sprintf("The first %d of %d retries.", maxRetryBars, len(s.Attempts))
	}
	if len(attempts) == 0 {
		c.Caption = "No retry: a failed attempt is final."
		return c
	}
	top := int64(1)
	for _, a := range attempts {
		top = max(top, a.DelayMax, a.Delay)
	}
	height := c.PlotY - 12
	y := func(ms int64) float64 { return round1(c.PlotY - float64(ms)/float64(top)*height) }
	slot := c.PlotW / float64(len(attempts))
	w := max(1, slot*0.7)
	every := int(math.Ceil(float64(len(attempts)) / 15)) // at most 15 labels
	for i, a := range attempts {
		x := c.PlotX + float64(i)*slot + (slot-w)/2
		b := chartBar{X: round1(x), Y: y(a.Delay), W: round1(w), H: round1(c.PlotY - y(a.Delay)), Class: "bar " + a.Phase,
			Title: fmt.Sprintf("attempt %d (%s): after %s", a.Attempt, a.Phase, formatMs(a.Delay))}
		if a.DelayMin != a.DelayMax {
			b.Whisker, b.Lo, b.Hi, b.WX = true, y(a.DelayMin), y(a.DelayMax), round1(x+w/2)
			b.Title += fmt.Sprintf(" (%s to %s with jitter)", formatMs(a.DelayMin), formatMs(a.DelayMax))
		}
		c.Bars = append(c.Bars, b)
		if i%every == 0 {
			c.XTicks = append(c.XTicks, tick{X: round1(x + w/2), Y: c.PlotY + 16, Label: fmt.Sprint(a.Attempt)})
		}
	}
	for _, f := range []float64{0, 0.5, 1} {
		v := int64(f * float64(top))
		c.YTicks = append(c.YTicks, tick{X: c.PlotX - 6, Y: y(v), Label: formatMs(v)})
	}
	return c
}

// waterfall is a message's timeline: per subscription, a row per attempt.
type waterfall struct {
	W, H   int
	Label  string
	PlotX  float64
	PlotW  float64
	Rows   []waterfallRow
	XTicks []tick
	Bottom float64
}

type waterfallRow struct {
	Y     float64
	Label string // left of the plot
	Head  bool   // a subscription's header row
	MidY  float64
	// Wait is the scheduled delay, from the copy's creation to when it was due.
	WaitX, WaitX2, WaitW float64
	// Req is the push request, from its start to its answer; Mark is a
	// point event when there was no request (a send, a pull).
	ReqX, ReqW float64
	HasReq     bool
	MarkX      float64
	Class      string
	Title      string
	Note       string // right of the bar
	NoteX      float64
}

// timelineRow is one attempt of the timeline's table.
type timelineRow struct {
	Subscription string
	publish.AttemptResponse
}

const rowHeight = 24

// drawTimeline lays out ev's attempts from its publication to the latest
// thing that happened (now, while an attempt is in flight).
func drawTimeline(ev publish.EventResponse, now time.Time) waterfall {
	w := waterfall{W: 760, PlotX: 110, PlotW: 440,
		Label: fmt.Sprintf("Timeline of event %s: every attempt per subscription, from publication", ev.EventID)}
	t0 := ev.PublishedAt
	at := func(t time.Time) float64 { return float64(t.Sub(t0).Milliseconds()) }
	span := 1.0
	for _, d := range ev.Deliveries {
		for _, a := range d.Attempts {
			span = max(span, at(a.CreatedAt)+float64(a.ScheduledDelay))
			if a.CompletedAt != nil {
				span = max(span, at(*a.CompletedAt))
			} else {
				span = max(span, at(now))
			}
		}
	}
	x := func(ms float64) float64 { return round1(w.PlotX + max(0, ms)/span*w.PlotW) }
	y := 28.0
	for _, d := range ev.Deliveries {
		w.Rows = append(w.Rows, waterfallRow{Y: y, Head: true, Label: d.SubscriptionType + " subscription " + short(d.SubscriptionID)})
		y += rowHeight
		for _, a := range d.Attempts {
			created := at(a.CreatedAt)
			row := waterfallRow{Y: y, MidY: y + 7, Label: fmt.Sprintf("attempt %d", a.Attempt), Class: "st-" + string(a.Status),
				WaitX: x(created), WaitX2: x(created + float64(a.ScheduledDelay))}
			row.WaitW = round1(row.WaitX2 - row.WaitX)
			end := at(now)
			if a.CompletedAt != nil {
				end = at(*a.CompletedAt)
			}
			switch {
			case a.Latency != nil && a.CompletedAt != nil:
				row.HasReq, row.ReqX = true, x(end-float64(*a.Latency))
				row.ReqW = max(2, round1(x(end)-row.ReqX))
			default:
				row.MarkX = x(end)
			}
			row.Title = fmt.Sprintf("attempt %d: %s", a.Attempt, a.Status)
			row.Note = string(a.Status)
			if a.StatusCode != nil {
				row.Note += fmt.Sprintf(" · HTTP %d", *a.StatusCode)
			}
			if a.Latency != nil {
				row.Note += " · " + formatMs(*a.Latency)
			}
			if a.ScheduledDelay > 0 {
				row.Title += ", waited " + formatMs(a.ScheduledDelay)
			}
			row.NoteX = min(x(end)+6, w.PlotX+w.PlotW+4)
			w.Rows = append(w.Rows, row)
			y += rowHeight
		}
	}
	w.Bottom = y
	w.H = int(y) + 8
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		w.XTicks = append(w.XTicks, tick{X: x(f * span), Y: 14, Label: "+" + formatMs(int64(f*span))})
	}
	return w
}

// short is the start of an id, enough to tell rows apart.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// final reports whether no attempt of ev is still to come: the timeline
// stops refreshing itself then.
func final(ev publish.EventResponse) bool {
	for _, d := range ev.Deliveries {
		if len(d.Attempts) == 0 {
			return false
		}
		switch d.Attempts[len(d.Attempts)-1].Status {
		case "pending", "sent", "failed", "deferred":
			return false
		}
	}
	return true
}
