package retry

import (
	"errors"

	"github.com/roomhub/messaging-api/api"
)

type apiProblems struct{ api.Problems }

func (p *apiProblems) has(field string) bool {
	var ve *api.ValidationError
	if !errors.As(p.Err(), &ve) {
		return false
	}
	for _, f := range ve.Fields {
		if f.Field == field {
			return true
		}
	}
	return false
}
