package store_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/seal"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
	"github.com/roomhub/messaging-api/subscriptions"
)

func testKey(t *testing.T, s string) seal.Key {
	t.Helper()
	k, err := seal.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// pushSubWithAuth stores a PUSH subscription with auth in a fresh room of
// db.
func pushSubWithAuth(t *testing.T, db *store.DB, auth *subscriptions.PushAuth) (subscriptions.Subscription, error) {
	t.Helper()
	sub := subscriptionFixture(t, db)
	sub.ID, sub.Type, sub.PushURL, sub.SigningSecret, sub.PushAuth = uuid.Must(uuid.NewV7()), subscriptions.TypePush, "https://example.com/h", "whsec_AAAA", auth
	return sub, db.Subscriptions().CreateSubscription(context.Background(), sub)
}

func samePushAuth(a, b *subscriptions.PushAuth) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Type == b.Type && a.Username == b.Username && a.Password == b.Password && a.Token == b.Token && maps.Equal(a.Headers, b.Headers)
}

// TestPushAuthSealed: a subscription's push credential is stored encrypted,
// bound to its row, read back as it was written, re-encrypted under a new
// key after a rotation, and refused without a key.
func TestPushAuthSealed(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			plain := storetest.Open(t, d)
			keyA := testKey(t, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Au2Tf8FIQ8=")
			keyB := testKey(t, "q3Jx5mYb0Jw8m3m2oQ6m1d7h0b8W2Zy9QxV4u5t6s7A=")
			db := plain.WithKeyring(seal.NewKeyring(keyA))
			basic := &subscriptions.PushAuth{Type: subscriptions.AuthBasic, Username: "alice", Password: "pa55-w0rd"}

			if _, err := pushSubWithAuth(t, plain, basic); !errors.Is(err, subscriptions.ErrNoPushAuthKey) {
				t.Fatalf("without a key: %v, want ErrNoPushAuthKey", err)
			}
			sub, err := pushSubWithAuth(t, db, basic)
			if err != nil {
				t.Fatal(err)
			}
			sealed, keyID := db.RawPushAuth(t, sub.ID)
			if keyID != keyA.ID() || sealed == "" || strings.Contains(sealed, "pa55") || strings.Contains(sealed, "alice") {
				t.Fatalf("stored %q under key %q", sealed, keyID)
			}
			got, err := db.Subscriptions().Subscription(ctx, sub.RoomID, sub.ID)
			if err != nil || !samePushAuth(got.PushAuth, basic) {
				t.Fatalf("read back %v, %v", got.PushAuth, err)
			}
			list, err := db.Subscriptions().Subscriptions(ctx, subscriptions.Query{RoomID: sub.RoomID, Type: subscriptions.TypePush})
			if err != nil || len(list) != 1 || !samePushAuth(list[0].PushAuth, basic) {
				t.Fatalf("listed %v, %v", list, err)
			}

			// An update writes the credential again (a fresh nonce), or removes it.
			headers := &subscriptions.PushAuth{Type: subscriptions.AuthHeaders, Headers: map[string]string{"X-Api-Key": "k-1", "X-Tenant": "t"}}
			sub.PushAuth = headers
			if err := db.Subscriptions().UpdateSubscription(ctx, sub); err != nil {
				t.Fatal(err)
			}
			if again, _ := db.RawPushAuth(t, sub.ID); again == sealed {
				t.Error("an update stored the same sealed value")
			}
			if got, err := db.Subscriptions().Subscription(ctx, sub.RoomID, sub.ID); err != nil || !samePushAuth(got.PushAuth, headers) {
				t.Fatalf("after update: %v, %v", got.PushAuth, err)
			}

			// Sealed for one row, it does not open on another.
			other, err := pushSubWithAuth(t, db, &subscriptions.PushAuth{Type: subscriptions.AuthBearer, Token: "tok"})
			if err != nil {
				t.Fatal(err)
			}
			sealedHeaders, _ := db.RawPushAuth(t, sub.ID)
			otherSealed, _ := db.RawPushAuth(t, other.ID)
			db.SetRawPushAuth(t, other.ID, sealedHeaders, keyA.ID())
			if _, err := db.Subscriptions().Subscription(ctx, other.RoomID, other.ID); err == nil {
				t.Error("a credential copied from another subscription opens")
			}
			db.SetRawPushAuth(t, other.ID, otherSealed, keyA.ID())

			// Rotation: B seals, A still opens; resealing moves every row to B.
			rotated := plain.WithKeyring(seal.NewKeyring(keyB, keyA))
			if ids, err := rotated.Subscriptions().PushAuthKeys(ctx); err != nil || !slices.Equal(ids, []string{keyA.ID()}) {
				t.Fatalf("keys in use: %v, %v", ids, err)
			}
			if got, err := rotated.Subscriptions().Subscription(ctx, sub.RoomID, sub.ID); err != nil || !samePushAuth(got.PushAuth, headers) {
				t.Fatalf("with the old key: %v, %v", got.PushAuth, err)
			}
			if n, err := rotated.Subscriptions().ResealPushAuth(ctx); err != nil || n != 2 {
				t.Fatalf("resealed %d, %v; want 2", n, err)
			}
			if ids, _ := rotated.Subscriptions().PushAuthKeys(ctx); !slices.Equal(ids, []string{keyB.ID()}) {
				t.Fatalf("keys in use after resealing: %v", ids)
			}
			onlyB := plain.WithKeyring(seal.NewKeyring(keyB))
			if got, err := onlyB.Subscriptions().Subscription(ctx, sub.RoomID, sub.ID); err != nil || !samePushAuth(got.PushAuth, headers) {
				t.Fatalf("with key B alone: %v, %v", got.PushAuth, err)
			}
			if n, err := onlyB.Subscriptions().ResealPushAuth(ctx); err != nil || n != 0 {
				t.Errorf("resealed %d again, %v", n, err)
			}
			_, err = db.Subscriptions().Subscription(ctx, sub.RoomID, sub.ID) // key A alone
			if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), keyB.ID()) || strings.Contains(err.Error(), "k-1") {
				t.Errorf("with key A alone: %v, want unavailable naming key B", err)
			}
		})
	}
}
