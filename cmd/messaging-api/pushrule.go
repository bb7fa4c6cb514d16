package main

import (
	"context"
	"fmt"
	"io"

	"github.com/roomhub/messaging-api/app"
)

// runPushRule is the push-rule subcommand: it stores the push target rule
// of its settings (PUSH_ALLOWED_CIDRS, PUSH_HTTPS_ONLY) as the one every
// process must start with, replacing the stored one. Processes running
// keep the rule they started with until they are restarted.
func runPushRule(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, db, err := app.OpenMigrated(ctx, args, getenv, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	rule := cfg.PushTarget.Rule()
	previous, err := db.ReplaceSetting(ctx, app.PushRuleSetting, rule)
	if err != nil {
		return fmt.Errorf("push target rule: %w", err)
	}
	if previous == "" {
		previous = "none stored"
	}
	fmt.Fprintf(stdout, "push target rule: %s (was: %s); restart every process with these settings\n", rule, previous)
	return nil
}
