package app

import (
	"log/slog"
	"net"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/console"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/store"
)

// NewConsole builds the web console of an API process and mounts it at
// /console/ on e, the process's HTTP handler, whose /v1 routes it calls for
// everything it shows and changes.
func NewConsole(cfg Config, logger *slog.Logger, db *store.DB, e *echo.Echo, m *metrics.Metrics) *console.Console {
	cn := console.New(console.Deps{
		API: e, Sessions: db.Console(), Stats: db.Console(), Now: Clock, Logger: logger, Config: cfg.Console.Config,
		Totals: func() console.Totals {
			t := m.Totals()
			return console.Totals{Published: t.Published, Outcomes: t.Outcomes}
		},
	})
	cn.Routes(e)
	return cn
}

// ConsoleURL is where a browser on this machine finds the console of a
// process listening on addr.
func ConsoleURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr + "/console/"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return "http://" + host + ":" + port + "/console/"
}
