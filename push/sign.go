package push

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// Sign returns the Standard Webhooks webhook-signature header value for body:
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" for each secret, space
// separated. Secrets are "whsec_" and the base64 of the key.
func Sign(secrets []string, id string, ts time.Time, body []byte) string {
	content := id + "." + strconv.FormatInt(ts.Unix(), 10) + "."
	sigs := make([]string, 0, len(secrets))
	for _, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil || len(key) == 0 {
			continue
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(content))
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " ")
}
