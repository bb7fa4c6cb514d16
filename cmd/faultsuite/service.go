package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/roomhub/messaging-api/cmd/internal/jsonapi"
	"github.com/roomhub/messaging-api/cmd/internal/svcproc"
)

// service is one process of the service binary (api or dispatcher) on a
// fixed loopback port, so that a restarted process answers where the killed
// one did.
type service struct {
	*proc
	base     string
	inflight atomic.Int64 // publish requests sent to it and not answered yet
}

// serviceEnv is the environment every service process gets: the private
// database and broker, and settings that suit a short run on loopback.
func serviceEnv(dbURL, brokerURL string) []string {
	// The inherited environment may tune the service (PUSH_WORKERS, ...); what
	// isolates the run comes after it and wins.
	return append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"BROKER_URL="+brokerURL,
		"AUTH_DISABLED=true",
		"PUSH_ALLOWED_CIDRS=127.0.0.0/8,::1/128",
		"PUSH_TIMEOUT=5s",
		"OUTBOX_POLL_INTERVAL=500ms",
		"MIGRATE_ON_START=true",
		"LOG_LEVEL=info",
		"LOG_FORMAT=text",
		"SHUTDOWN_TIMEOUT=5s",
	)
}

func newService(bin, command, name, tmp string, env []string) (*service, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return &service{
		base: "http://" + addr,
		proc: &proc{name: name, path: bin, args: []string{command}, env: append(slices.Clip(env), "HTTP_ADDR="+addr),
			logPath: filepath.Join(tmp, name+".log")},
	}, nil
}

// startReady starts the process and waits until /readyz answers 200.
func (s *service) startReady(ctx context.Context) error {
	if err := s.start(); err != nil {
		return err
	}
	return s.waitReady(ctx, 60*time.Second)
}

func (s *service) waitReady(ctx context.Context, within time.Duration) error {
	err := svcproc.WaitReady(ctx, s.base, within, s.exited())
	switch {
	case errors.Is(err, svcproc.ErrExited):
		return fmt.Errorf("%s exited during start-up\n%s", s.name, s.logTail(30))
	case err != nil && ctx.Err() == nil:
		return fmt.Errorf("%s %w\n%s", s.name, err, s.logTail(30))
	}
	return err
}

// apiClient calls the management and pull API.
type apiClient struct {
	hc *http.Client
}

func newAPIClient() *apiClient {
	return &apiClient{hc: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: 30 * time.Second,
			DisableCompression: true,
		},
	}}
}

// call sends body as JSON to base+path and decodes a want answer into out.
func (c *apiClient) call(ctx context.Context, base, method, path string, body any, want int, out any) error {
	return jsonapi.Call(ctx, c.hc, method, base+path, body, want, out)
}

// Names of what the suite creates.
const (
	roomName  = "faultsuite"
	eventType = "tick"
)

// setupRoom creates the room, its event type and version, a PUSH subscription
// to pushURL and a PULL subscription, and returns the PULL subscription's id.
// Retries are quick and many, so that a delivery failed by a fault is retried
// within the drain.
func (c *apiClient) setupRoom(ctx context.Context, base, pushURL string) (string, error) {
	steps := []struct {
		path string
		body any
	}{
		{"/v1/rooms", map[string]any{
			"identifier": roomName, "managerIdentifier": "faultsuite",
			"deliveryDelay": 500, "deliveryDelayMultiplier": 1.5, "deliveryAttempts": 30, "maxDeliveryDelay": 5000,
		}},
		{"/v1/rooms/" + roomName + "/event-types", map[string]any{"identifier": eventType}},
		{"/v1/rooms/" + roomName + "/event-types/" + eventType + "/versions", map[string]any{
			"schema": map[string]any{"type": "object", "required": []string{"seq"}},
		}},
		{"/v1/rooms/" + roomName + "/subscriptions", map[string]any{
			"type": "PUSH", "pushUrl": pushURL, "eventTypes": []map[string]any{{"eventType": eventType}},
		}},
	}
	for _, s := range steps {
		if err := c.call(ctx, base, http.MethodPost, s.path, s.body, http.StatusCreated, nil); err != nil {
			return "", err
		}
	}
	var sub struct {
		ID string `json:"id"`
	}
	err := c.call(ctx, base, http.MethodPost, "/v1/rooms/"+roomName+"/subscriptions", map[string]any{
		"type": "PULL", "ackDeadline": 15000, "eventTypes": []map[string]any{{"eventType": eventType}},
	}, http.StatusCreated, &sub)
	return sub.ID, err
}
