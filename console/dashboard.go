package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/roomhub/messaging-api/rooms"
)

// Bounds of the dashboard's store queries.
const (
	deadLetterCap = 10000            // dead letters counted at most
	slowWindow    = 15 * time.Minute // sends looked at for latency
	slowRows      = 20000            // at most this many of them
	slowTop       = 5
	statsTimeout  = 2 * time.Second
)

// outcomes are the outcomes of a copy, in the order the dashboard lists them.
var outcomes = []string{"delivered", "retried", "dead_lettered", "expired", "refused", "dropped"}

type outcomeRow struct {
	Name          string
	Recent, Total float64
}

type dashboardData struct {
	// ServiceWide: the key may do anything, so it sees the service's figures.
	ServiceWide bool
	Rooms       []rooms.RoomResponse

	RatePerSec   float64
	RateWindow   string
	RateChart    chart
	Outcomes     []outcomeRow
	OutcomeChart chart
	Since        time.Time

	Backlog         int
	OldestAge       time.Duration
	DeadLetters     int
	DeadLettersMore bool
	Slowest         []SubscriptionLatency
	StatsFailed     bool
}

// dashboard shows the service's figures to admin keys and, to every key,
// the rooms it reaches. It reloads itself every few seconds.
func (cn *Console) dashboard(r *request) error {
	d := dashboardData{ServiceWide: r.me.Admin()}
	rs, err := list[rooms.RoomResponse](r, "/v1/rooms", url.Values{"limit": {"20"}})
	if err != nil {
		return err
	}
	d.Rooms = rs.Items
	if d.ServiceWide {
		cn.figures(r.Request().Context(), &d)
	}
	v := r.view("Dashboard", "dashboard", d)
	v.Refresh = 10
	return cn.render(r.Context, http.StatusOK, "dashboard", v)
}

// figures fills in the service-wide figures: rates from the process's
// samples, the rest from bounded store queries.
func (cn *Console) figures(ctx context.Context, d *dashboardData) {
	samples := cn.samples.all()
	if cn.totals != nil {
		samples = append(samples, sample{At: cn.now(), Totals: cn.totals()})
	}
	if n := len(samples); n > 0 {
		first, last := samples[0], samples[n-1]
		d.Since = first.At
		// The rate over the last minute (or what the samples cover).
		from := first
		for _, s := range samples {
			if last.At.Sub(s.At) <= time.Minute {
				from = s
				break
			}
		}
		if secs := last.At.Sub(from.At).Seconds(); secs > 0 {
			d.RatePerSec = (last.Published - from.Published) / secs
			d.RateWindow = formatMs(last.At.Sub(from.At).Milliseconds())
		}
		d.RateChart = rateChart(samples)
		for _, o := range outcomes {
			d.Outcomes = append(d.Outcomes, outcomeRow{Name: o, Recent: last.Outcomes[o] - first.Outcomes[o], Total: last.Outcomes[o]})
		}
		d.OutcomeChart = outcomeChart(d.Outcomes, formatMs(last.At.Sub(first.At).Milliseconds()))
	}
	if cn.stats == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	var err error
	var oldest time.Time
	if d.Backlog, oldest, err = cn.stats.OutboxBacklog(ctx); err == nil && !oldest.IsZero() {
		d.OldestAge = cn.now().Sub(oldest).Truncate(time.Second)
	}
	d.StatsFailed = err != nil
	if n, err := cn.stats.DeadLetterCount(ctx, deadLetterCap+1); err == nil {
		d.DeadLetters, d.DeadLettersMore = min(n, deadLetterCap), n > deadLetterCap
	} else {
		d.StatsFailed = true
	}
	slow, err := cn.stats.SlowestSubscriptions(ctx, SlowQuery{Since: cn.now().Add(-slowWindow), Rows: slowRows, Top: slowTop})
	d.Slowest, d.StatsFailed = slow, d.StatsFailed || err != nil
}

// rateChart draws the events published per second in each sampling interval.
func rateChart(samples []sample) chart {
	c := chart{W: 480, H: 170, PlotX: 56, PlotY: 146, PlotW: 414, Label: "Events published per second, over the last minutes"}
	if len(samples) < 2 {
		c.Caption = "The rate appears after the first samples (every few seconds)."
		return c
	}
	rates := make([]float64, len(samples)-1)
	top := 1.0
	for i := 1; i < len(samples); i++ {
		secs := samples[i].At.Sub(samples[i-1].At).Seconds()
		if secs > 0 {
			rates[i-1] = max(0, samples[i].Published-samples[i-1].Published) / secs
		}
		top = max(top, rates[i-1])
	}
	slot := c.PlotW / float64(sampleKeep-1)
	height := c.PlotY - 10
	for i, v := range rates {
		h := round1(v / top * height)
		x := c.PlotX + c.PlotW - float64(len(rates)-i)*slot
		c.Bars = append(c.Bars, chartBar{X: round1(x + 1), Y: round1(c.PlotY - h), W: round1(max(1, slot-2)), H: h, Class: "rate",
			Title: fmt.Sprintf("%.1f events/s until %s", v, samples[i+1].At.UTC().Format("15:04:05"))})
	}
	for _, f := range []float64{0, 0.5, 1} {
		c.YTicks = append(c.YTicks, tick{X: c.PlotX - 6, Y: round1(c.PlotY - f*height), Label: fmt.Sprintf("%.1f/s", f*top)})
	}
	return c
}

// outcomeChart draws the recent outcomes as one bar each.
func outcomeChart(rows []outcomeRow, window string) chart {
	c := chart{W: 480, H: 170, PlotX: 40, PlotY: 146, PlotW: 430, Label: "Copies handled by outcome, over the last " + window}
	top := 1.0
	for _, r := range rows {
		top = max(top, r.Recent)
	}
	height := c.PlotY - 10
	slot := c.PlotW / float64(len(rows))
	for i, r := range rows {
		h := round1(r.Recent / top * height)
		x := c.PlotX + float64(i)*slot
		c.Bars = append(c.Bars, chartBar{X: round1(x + slot*0.15), Y: round1(c.PlotY - h), W: round1(slot * 0.7), H: h,
			Class: "out-" + r.Name, Title: fmt.Sprintf("%s: %.0f", r.Name, r.Recent)})
		c.XTicks = append(c.XTicks, tick{X: round1(x + slot/2), Y: c.PlotY + 16, Label: r.Name})
	}
	for _, f := range []float64{0, 0.5, 1} {
		c.YTicks = append(c.YTicks, tick{X: c.PlotX - 6, Y: round1(c.PlotY - f*height), Label: fmt.Sprintf("%.0f", f*top)})
	}
	return c
}
