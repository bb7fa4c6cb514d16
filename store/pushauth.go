package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/seal"
	"github.com/roomhub/messaging-api/subscriptions"
)

// sealedPushAuth is a subscription's pushAuth as it is sealed into
// subscriptions.push_auth.
type sealedPushAuth struct {
	Type     string            `json:"type"`
	Username string            `json:"username,omitempty"`
	Password string            `json:"password,omitempty"`
	Token    string            `json:"token,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// pushAuthContext binds a sealed credential to its subscription: copied
// onto another row it does not open, so a database write alone cannot send
// one subscription's credentials to another's URL.
func pushAuthContext(id uuid.UUID) []byte { return []byte("subscriptions.push_auth:" + id.String()) }

// sealPushAuth seals the credential of subscription id under the current
// key: ("", "") for none, subscriptions.ErrNoPushAuthKey without a key.
func (s *Subscriptions) sealPushAuth(id uuid.UUID, a *subscriptions.PushAuth) (keyID, sealed string, err error) {
	if a == nil {
		return "", "", nil
	}
	if !s.db.keys.CanSeal() {
		return "", "", subscriptions.ErrNoPushAuthKey
	}
	plain, err := json.Marshal(sealedPushAuth{Type: string(a.Type), Username: a.Username, Password: a.Password, Token: a.Token, Headers: a.Headers})
	if err != nil {
		return "", "", err
	}
	return s.db.keys.Seal(plain, pushAuthContext(id))
}

// openPushAuth opens a row's credential. One this process cannot open (its
// key is not configured here) is an error naming the key, never the
// secret: the subscription cannot be used as it is meant to be.
func (s *Subscriptions) openPushAuth(r subscriptionRow) (*subscriptions.PushAuth, error) {
	if r.PushAuth == "" {
		return nil, nil
	}
	plain, err := s.db.keys.Open(r.PushAuthKey, r.PushAuth, pushAuthContext(r.ID))
	if err != nil {
		err = fmt.Errorf("the pushAuth of subscription %s: %w (PUSH_AUTH_KEY, PUSH_AUTH_OLD_KEYS)", r.ID, err)
		if errors.Is(err, seal.ErrUnknownKey) {
			return nil, fmt.Errorf("%w: %w", err, api.ErrUnavailable)
		}
		return nil, err
	}
	var a sealedPushAuth
	if err := json.Unmarshal(plain, &a); err != nil {
		return nil, fmt.Errorf("the pushAuth of subscription %s: %w", r.ID, err)
	}
	return &subscriptions.PushAuth{Type: subscriptions.AuthType(a.Type), Username: a.Username, Password: a.Password, Token: a.Token, Headers: a.Headers}, nil
}

// PushAuthKeys are the ids of the keys that sealed the stored push
// credentials: a process must have each of them.
func (s *Subscriptions) PushAuthKeys(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.tx(ctx).Model(&subscriptionRow{}).Distinct("push_auth_key").Where("push_auth_key <> ''").Order("push_auth_key").Pluck("push_auth_key", &ids).Error
	return ids, translate(err, nil, nil)
}

// ResealPushAuth seals again, under the current key, every push credential
// an older key sealed, and returns how many it resealed: after a key
// rotation, so that the old key can be retired. A credential changed
// meanwhile (by a PATCH, or another process doing the same) is left as it
// is: it is under the current key already.
func (s *Subscriptions) ResealPushAuth(ctx context.Context) (int, error) {
	current := s.db.keys.Current()
	if current == "" {
		return 0, nil
	}
	var rows []subscriptionRow
	if err := s.tx(ctx).Select("id", "push_auth", "push_auth_key").
		Where("push_auth_key <> '' AND push_auth_key <> ?", current).Find(&rows).Error; err != nil {
		return 0, translate(err, nil, nil)
	}
	n := 0
	for _, r := range rows {
		plain, err := s.db.keys.Open(r.PushAuthKey, r.PushAuth, pushAuthContext(r.ID))
		if err != nil {
			return n, fmt.Errorf("the pushAuth of subscription %s: %w", r.ID, err)
		}
		keyID, sealed, err := s.db.keys.Seal(plain, pushAuthContext(r.ID))
		if err != nil {
			return n, err
		}
		res := s.tx(ctx).Model(&subscriptionRow{}).Where("id = ? AND push_auth = ?", r.ID, r.PushAuth).
			Updates(map[string]any{"push_auth": sealed, "push_auth_key": keyID})
		if res.Error != nil {
			return n, translate(res.Error, nil, nil)
		}
		n += int(res.RowsAffected)
	}
	return n, nil
}
