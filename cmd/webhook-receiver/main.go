// Command webhook-receiver is a local push endpoint for trying the service:
// it prints every request it gets, checks its Standard Webhooks signature
// when given the subscription's secret, and can fail the first requests to
// show retries.
//
//	go run ./cmd/webhook-receiver -addr :9000 -fail 2 -secret whsec_...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/roomhub/messaging-api/push"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "webhook-receiver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("webhook-receiver", flag.ContinueOnError)
	addr := fs.String("addr", ":9000", "address to listen on")
	fail := fs.Int("fail", 0, "answer 500 to the first N requests")
	status := fs.Int("status", 500, "the status code of a failed answer")
	secret := fs.String("secret", "", "the subscription's signingSecret, to verify signatures")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var n atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		i := n.Add(1)
		code := http.StatusOK
		if i <= int64(*fail) {
			code = *status
		}
		sig := "not checked (no -secret)"
		if *secret != "" {
			sig = "valid"
			if _, err := push.Verify([]string{*secret}, r.Header.Get("Webhook-Id"), r.Header.Get("Webhook-Timestamp"), body,
				r.Header.Get("Webhook-Signature"), time.Now(), 5*time.Minute); err != nil {
				sig = "INVALID (" + err.Error() + ")"
			}
		}
		fmt.Fprintf(out, "%s request %d: attempt %s, event %s, type %s v%s, correlation %s, signature %s -> %d\n  %s\n",
			time.Now().Format("15:04:05.000"), i, r.Header.Get("X-Attempt"), r.Header.Get("Webhook-Id"),
			r.Header.Get("X-Event-Type"), r.Header.Get("X-Event-Version"), r.Header.Get("X-Correlation-Id"), sig, code, body)
		w.WriteHeader(code)
	})
	srv := &http.Server{Addr: *addr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Fprintf(out, "listening on %s (failing the first %d requests)\n", *addr, *fail)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}
