package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/roomhub/messaging-api/store/storetest"
)

// TestClaimSetting: the first claim of a setting stores it, whoever comes
// next (at the same moment too) reads it back; a replacement changes it for
// every later claim.
func TestClaimSetting(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			var wg sync.WaitGroup
			got := make([]string, 8)
			for i := range got {
				wg.Go(func() {
					v, err := db.ClaimSetting(ctx, "rule", fmt.Sprint("value ", i))
					if err != nil {
						t.Error(err)
					}
					got[i] = v
				})
			}
			wg.Wait()
			for _, v := range got {
				if v != got[0] {
					t.Fatalf("claims read back %q: not one value", got)
				}
			}
			if v, err := db.ClaimSetting(ctx, "rule", "later"); err != nil || v != got[0] {
				t.Fatalf("a later claim read %q, %v; want %q", v, err, got[0])
			}
			if prev, err := db.ReplaceSetting(ctx, "rule", "new"); err != nil || prev != got[0] {
				t.Fatalf("replace: previous %q, %v; want %q", prev, err, got[0])
			}
			if v, err := db.ClaimSetting(ctx, "rule", "later"); err != nil || v != "new" {
				t.Fatalf("after the replacement a claim read %q, %v", v, err)
			}
			if prev, err := db.ReplaceSetting(ctx, "other", "x"); err != nil || prev != "" {
				t.Fatalf("replacing nothing: previous %q, %v", prev, err)
			}
		})
	}
}
