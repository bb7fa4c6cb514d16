package main

import (
	"context"
	"fmt"
	"io"

	"github.com/roomhub/messaging-api/store"
)

// pushRuleSetting names the push target rule among the stored settings.
const pushRuleSetting = "push_target_rule"

// agreePushRule makes every process that shares the database use one push
// target rule (PUSH_ALLOWED_CIDRS and PUSH_HTTPS_ONLY). The rule is applied
// twice: to a push URL when an API process stores it, and to each delivery
// by whichever dispatcher takes the message from the one shared push queue.
// With rules that differ, a URL one process accepted would be dead-lettered
// by another, or a dispatcher would reach a network the API refuses. The
// first process to start stores its rule; a process whose rule differs
// refuses to start, naming both; `messaging-api push-rule` replaces the
// stored rule.
func agreePushRule(ctx context.Context, cfg Config, db *store.DB) error {
	mine := cfg.PushTarget.Rule()
	stored, err := db.ClaimSetting(ctx, pushRuleSetting, mine)
	if err != nil {
		return fmt.Errorf("push target rule: %w", err)
	}
	if stored != mine {
		return fmt.Errorf("the push target rule of this process (%s, from PUSH_ALLOWED_CIDRS and PUSH_HTTPS_ONLY) "+
			"differs from the one stored in the database (%s), which the other processes sharing it use: "+
			"give this process the same settings, or replace the stored rule with `messaging-api push-rule` "+
			"and restart every process with the new settings", mine, stored)
	}
	return nil
}

// runPushRule is the push-rule subcommand: it stores the push target rule
// of its settings (PUSH_ALLOWED_CIDRS, PUSH_HTTPS_ONLY) as the one every
// process must start with, replacing the stored one. Processes running
// keep the rule they started with until they are restarted.
func runPushRule(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, db, err := openMigrated(ctx, args, getenv, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	rule := cfg.PushTarget.Rule()
	previous, err := db.ReplaceSetting(ctx, pushRuleSetting, rule)
	if err != nil {
		return fmt.Errorf("push target rule: %w", err)
	}
	if previous == "" {
		previous = "none stored"
	}
	fmt.Fprintf(stdout, "push target rule: %s (was: %s); restart every process with these settings\n", rule, previous)
	return nil
}
