package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	cfg, err := loadConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Addr != ":8080" || cfg.DatabaseURL != "sqlite:data/messaging-api.db" || cfg.BrokerURL != "embedded" ||
		!cfg.MigrateOnStart || cfg.HTTP.ShutdownTimeout != 15*time.Second || cfg.HTTP.BodyLimit != 1<<20 {
		t.Errorf("defaults: %+v", cfg)
	}

	cfg, err = loadConfig([]string{"-addr", ":9000"}, env(map[string]string{"HTTP_ADDR": ":7000", "LOG_LEVEL": "debug"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Addr != ":9000" || cfg.LogLevel.String() != "DEBUG" {
		t.Errorf("flag should win over env: %+v", cfg)
	}

	bad := []struct{ env, value string }{
		{"DATABASE_URL", "mysql://x"},
		{"LOG_LEVEL", "loud"},
		{"LOG_FORMAT", "xml"},
		{"MIGRATE_ON_START", "perhaps"},
		{"HTTP_BODY_LIMIT", "12"},
		{"SHUTDOWN_TIMEOUT", "soon"},
		{"HTTP_READ_TIMEOUT", "-1s"},
	}
	for _, b := range bad {
		t.Run(b.env, func(t *testing.T) {
			_, err := loadConfig(nil, env(map[string]string{b.env: b.value}), io.Discard)
			if err == nil || !strings.Contains(err.Error(), b.env) {
				t.Errorf("error %v does not name %s", err, b.env)
			}
		})
	}
}

func TestConfigLogHidesSecrets(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(nil, func(k string) string {
		return map[string]string{
			"DATABASE_URL":             "postgres://app:s3cret@db:5432/app",
			"BROKER_URL":               "stomp://artemis:hunter2@mq:61613?dialect=artemis",
			"AUTH_BOOTSTRAP_ADMIN_KEY": "mapi_bootstrap-0123456789-0123456789-xyz",
		}[k]
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.logValue().String()
	if strings.Contains(s, "s3cret") || strings.Contains(s, "hunter2") || strings.Contains(s, "bootstrap-0123") {
		t.Errorf("secrets in log value: %s", s)
	}
}
