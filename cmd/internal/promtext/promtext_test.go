package promtext

import "testing"

func TestValue(t *testing.T) {
	t.Parallel()
	text := []byte(`# HELP messaging_deliveries_total What became of each copy.
# TYPE messaging_deliveries_total counter
messaging_deliveries_total{outcome="delivered",type="pull"} 7
messaging_deliveries_total{outcome="delivered",type="push"} 1234
messaging_deliveries_total{outcome="retried",type="push"} 5
messaging_deliveries_total_created{outcome="delivered",type="push"} 1.7e+09
messaging_outbox_relayed_total{result="sent"} 2.5e+03
messaging_outbox_relayed_total{result="failed"} 0
messaging_odd{note="a \"quoted\", value",x="1"} 3
messaging_plain 42
`)
	for _, tt := range []struct {
		name   string
		want   map[string]string
		value  float64
		exists bool
	}{
		{"messaging_deliveries_total", map[string]string{"type": "push", "outcome": "delivered"}, 1234, true},
		{"messaging_deliveries_total", map[string]string{"type": "push"}, 1239, true},
		{"messaging_deliveries_total", nil, 1246, true},
		{"messaging_deliveries_total", map[string]string{"type": "push", "outcome": "expired"}, 0, false},
		{"messaging_outbox_relayed_total", map[string]string{"result": "sent"}, 2500, true},
		{"messaging_odd", map[string]string{"note": `a "quoted", value`, "x": "1"}, 3, true},
		{"messaging_plain", nil, 42, true},
		{"messaging_plai", nil, 0, false},
		{"messaging_absent", nil, 0, false},
	} {
		v, ok := Value(text, tt.name, tt.want)
		if v != tt.value || ok != tt.exists {
			t.Errorf("Value(%s, %v) = %v, %v; want %v, %v", tt.name, tt.want, v, ok, tt.value, tt.exists)
		}
	}
}
