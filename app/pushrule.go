package app

import (
	"context"
	"fmt"

	"github.com/roomhub/messaging-api/store"
)

// PushRuleSetting names the push target rule among the stored settings.
const PushRuleSetting = "push_target_rule"

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
	stored, err := db.ClaimSetting(ctx, PushRuleSetting, mine)
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
