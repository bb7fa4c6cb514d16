package metrics

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// TestEveryMetricDocumented: docs/operations.md lists every metric this
// package registers.
func TestEveryMetricDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := New(Options{RoomLabel: true})
	m.CollectStore(StoreQueries{
		Outbox:       func(context.Context) (int, time.Time, error) { return 3, time.Now().Add(-time.Minute), nil },
		Leases:       func(context.Context) (int, error) { return 2, nil },
		OpenCircuits: func(context.Context) (int, error) { return 1, nil },
	}, time.Second, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Touch every vector so that it has a series to gather.
	m.Published("r", 1, map[string]int{"push": 1})
	m.Relayed("sent", 1)
	m.Replayed("push", 1)
	m.Handled("push", "delivered", 1, time.Second)
	m.RetryScheduled("push", time.Second)
	m.PushRequest("delivered", time.Millisecond)
	m.Deferred("slow")
	m.Paused(false)
	m.CircuitClosed()
	m.httpDuration.WithLabelValues("GET", "/x", "200").Observe(0.1)
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, namespace+"_") {
			continue
		}
		n++
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s is not in docs/operations.md", name)
		}
	}
	if n != 22 {
		t.Errorf("gathered %d messaging_ metrics, want 22: a new one needs a row in the doc and here", n)
	}
}

func TestMethodLabelBounded(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"GET": "GET", "POST": "POST", "BREW": "other", "get": "other"} {
		if got := method(in); got != want {
			t.Errorf("method(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTotals: the dashboard's totals add up every room and subscription type.
func TestTotals(t *testing.T) {
	t.Parallel()
	m := New(Options{RoomLabel: true})
	m.Published("a", 2, nil)
	m.Published("b", 3, nil)
	m.Handled("push", "delivered", 1, time.Second)
	m.Handled("pull", "delivered", 1, time.Second)
	m.Handled("push", "retried", 1, 0)
	got := m.Totals()
	if got.Published != 5 || got.Outcomes["delivered"] != 2 || got.Outcomes["retried"] != 1 || got.Outcomes["expired"] != 0 {
		t.Errorf("Totals = %+v", got)
	}
}

// TestOutcomesStartAtZero: the outcome series exist before the first of each
// happens, so that rate() and sums over them work from the start.
func TestOutcomesStartAtZero(t *testing.T) {
	t.Parallel()
	families, err := New(Options{}).Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		namespace + "_deliveries_total":              12,
		namespace + "_outbox_relayed_total":          4,
		namespace + "_push_request_duration_seconds": 3,
	}
	for _, f := range families {
		if n, ok := want[f.GetName()]; ok {
			if len(f.GetMetric()) != n {
				t.Errorf("%s: %d series before anything happened, want %d", f.GetName(), len(f.GetMetric()), n)
			}
			delete(want, f.GetName())
		}
	}
	for name := range want {
		t.Errorf("%s: no series before anything happened", name)
	}
}
