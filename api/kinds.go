package api

import (
	"errors"
	"net/http"
)

// ProblemTypePrefix starts the type URI of every kind of problem: the type
// of a kind is ProblemTypePrefix + its code ("/problems/validation_failed").
//
// RFC 9457 (section 3.1.1) recommends absolute type URIs, and relative ones
// with the full path when relative: the service runs on the operator's own
// hosts, so no absolute URI would both stay stable and lead somewhere. The
// path resolves against the request's URL to the service's own
// GET /problems/{code}, which documents the kind (dereferenced, a type URI
// should lead to documentation for people), and is the same string in every
// answer, which clients compare.
const ProblemTypePrefix = "/problems/"

// Kind is one kind of problem the API answers: a stable machine code that
// clients branch on, its type URI, the status and title every problem of the
// kind has, and what it means and what a client should do (docs and
// GET /problems/{code}). Kinds are errors: features wrap them into their own
// sentinels (fmt.Errorf("room %w", api.ErrNotFound)), and ErrorHandler
// answers an error with the kind it wraps. A kind with a parent is also its
// parent to errors.Is: every conflict is an ErrConflict.
type Kind struct {
	Code    string
	Status  int
	Title   string
	Meaning string
	Action  string
	text    string // the error's text
	parent  *Kind
}

// Type is the kind's RFC 9457 type URI.
func (k *Kind) Type() string { return ProblemTypePrefix + k.Code }

// Error is the kind's text, which the sentinels that wrap it end with.
func (k *Kind) Error() string { return k.text }

// Is makes a kind also its parent kind to errors.Is.
func (k *Kind) Is(target error) bool {
	p, ok := target.(*Kind)
	return ok && k.parent != nil && (k.parent == p || k.parent.Is(p))
}

// The kinds of problems, one per code. The table Kinds lists them all;
// openapi.yaml (the Problem schema's code) and docs/api-guide.md list the
// same codes, which a test checks.
var (
	ErrMalformed = &Kind{
		Code: "malformed_request", Status: http.StatusBadRequest, Title: "Malformed request", text: "malformed request",
		Meaning: "The body is not JSON at all: empty, malformed, not an object, or followed by more data; `errors` names the field `body`.",
		Action:  "Fix the request; sending it again unchanged fails the same way.",
	}
	ErrUnauthorized = &Kind{
		Code: "unauthorized", Status: http.StatusUnauthorized, Title: "No usable API key", text: "unauthorized",
		Meaning: "The request has no `Authorization: Bearer <key>` header, or its key is malformed, unknown, expired or revoked.",
		Action:  "Send a valid API key; make a new one if it expired or was revoked.",
	}
	ErrForbidden = &Kind{
		Code: "forbidden", Status: http.StatusForbidden, Title: "Not allowed for this API key", text: "forbidden",
		Meaning: "The API key is valid, but its role or its rooms do not allow this operation, on this room, or with this body.",
		Action:  "Use a key whose role and rooms allow it, or have an admin grant the room; retrying with the same key fails again.",
	}
	ErrNotFound = &Kind{
		Code: "not_found", Status: http.StatusNotFound, Title: "Not found", text: "not found",
		Meaning: "What the path names (a room, event type, version, subscription, dead letter, event, API key, or the route itself) does not exist or is not visible to the key; or, with `errors`, what a field of the body names does not.",
		Action:  "Check the identifiers in the path (or the field named in `errors`); create what is missing first.",
	}
	ErrMethodNotAllowed = &Kind{
		Code: "method_not_allowed", Status: http.StatusMethodNotAllowed, Title: "Method not allowed", text: "method not allowed",
		Meaning: "The path exists, but not with this method; the `Allow` header lists those it has.",
		Action:  "Use one of the methods in `Allow`.",
	}
	ErrConflict = &Kind{
		Code: "conflict", Status: http.StatusConflict, Title: "Conflict with the current state", text: "conflict",
		Meaning: "The request conflicts with the current state of what it names. The codes below say how, where they can.",
		Action:  "Read the resource, then decide; retrying unchanged fails until its state changes.",
	}
	ErrAlreadyExists = &Kind{
		Code: "already_exists", Status: http.StatusConflict, Title: "Already exists", text: "conflict", parent: ErrConflict,
		Meaning: "A room with this identifier, an event type with this identifier in the room, or this version of the event type already exists.",
		Action:  "Use the existing one (a setup script may take this as done), or pick another identifier or version.",
	}
	ErrInUse = &Kind{
		Code: "in_use", Status: http.StatusConflict, Title: "In use", text: "conflict", parent: ErrConflict,
		Meaning: "What the request would delete is still used: a room with subscriptions, an event type or version that subscriptions name.",
		Action:  "Delete or change what uses it first (or delete a room with `?force=true`).",
	}
	ErrInvalidState = &Kind{
		Code: "invalid_state", Status: http.StatusConflict, Title: "Not allowed in this state", text: "conflict", parent: ErrConflict,
		Meaning: "The resource's state or type does not allow the operation: a TERMINATED room or subscription, a subscription that is PENDING, REJECTED or not ACTIVE, an operation of PUSH subscriptions on a PULL one (or the reverse), an approval of one already decided, a version whose schema no longer passes the limits.",
		Action:  "Read the resource; change its state first if it can be changed (a TERMINATED or REJECTED one cannot).",
	}
	ErrIdempotencyKeyReused = &Kind{
		Code: "idempotency_key_reused", Status: http.StatusConflict, Title: "Idempotency key reused", text: "conflict", parent: ErrConflict,
		Meaning: "The `Idempotency-Key` was used in this room within 24 h with a different request body.",
		Action:  "Use a new key for a new request; resend the first request's exact body to get its result again.",
	}
	ErrLimitReached = &Kind{
		Code: "limit_reached", Status: http.StatusConflict, Title: "Limit reached", text: "conflict", parent: ErrConflict,
		Meaning: "The room has as many subscriptions as it may (`ROOM_MAX_SUBSCRIPTIONS`, not counting TERMINATED and REJECTED ones).",
		Action:  "Delete or terminate a subscription of the room first, or ask the operator to raise the limit.",
	}
	ErrPayloadTooLarge = &Kind{
		Code: "payload_too_large", Status: http.StatusRequestEntityTooLarge, Title: "Request body too large", text: "request body too large",
		Meaning: "The request body is larger than the service takes (`HTTP_BODY_LIMIT`, 1 MiB by default).",
		Action:  "Send a smaller body: fewer messages per batch, a smaller payload or schema.",
	}
	ErrUnsupportedMediaType = &Kind{
		Code: "unsupported_media_type", Status: http.StatusUnsupportedMediaType, Title: "Unsupported media type", text: "unsupported media type",
		Meaning: "A request with a body does not say `Content-Type: application/json` (or another `application/*+json` type, with no `charset` other than `utf-8`).",
		Action:  "Send the body as JSON with `Content-Type: application/json`.",
	}
	ErrValidation = &Kind{
		Code: "validation_failed", Status: http.StatusUnprocessableEntity, Title: "Validation failed", text: "invalid request",
		Meaning: "Fields of the request are invalid: of the wrong type, out of range, unknown, or refused by the event type's schema; `errors` names each one (with a JSON `pointer` where it helps).",
		Action:  "Fix each field `errors` names; sending it again unchanged fails the same way.",
	}
	ErrRateLimited = &Kind{
		Code: "rate_limited", Status: http.StatusTooManyRequests, Title: "Rate limit exceeded", text: "rate limit exceeded",
		Meaning: "The API key publishes faster than its rate limit allows (per API process); nothing of the request was published.",
		Action:  "Wait the seconds `Retry-After` says, then send it again; publish more slowly or in batches.",
	}
	ErrHeaderTooLarge = &Kind{
		Code: "header_too_large", Status: http.StatusRequestHeaderFieldsTooLarge, Title: "Request header too large", text: "request header too large",
		Meaning: "The request line and header fields take more than 64 KiB.",
		Action:  "Send fewer or shorter headers.",
	}
	ErrInternal = &Kind{
		Code: "internal_error", Status: http.StatusInternalServerError, Title: "Internal error", text: "internal error",
		Meaning: "The service failed in a way it did not expect; the error is logged under the request id.",
		Action:  "Retry if the operation is safe to repeat (an `Idempotency-Key` makes a publish so); report it with the `requestId` if it persists.",
	}
	ErrUnavailable = &Kind{
		Code: "unavailable", Status: http.StatusServiceUnavailable, Title: "Temporarily unavailable", text: "temporarily unavailable",
		Meaning: "The database, or the broker where the operation needs it (creating a PULL subscription's queue, pulling), cannot be reached right now.",
		Action:  "Wait the seconds `Retry-After` says, then send it again (a publish with the same `Idempotency-Key`, so that it is not published twice).",
	}
)

// Kinds is the table of every kind of problem the API answers, in the order
// of their status.
var Kinds = []*Kind{
	ErrMalformed, ErrUnauthorized, ErrForbidden, ErrNotFound, ErrMethodNotAllowed,
	ErrConflict, ErrAlreadyExists, ErrInUse, ErrInvalidState, ErrIdempotencyKeyReused, ErrLimitReached,
	ErrPayloadTooLarge, ErrUnsupportedMediaType, ErrValidation, ErrRateLimited, ErrHeaderTooLarge,
	ErrInternal, ErrUnavailable,
}

// KindOf is the kind with code, nil when there is none.
func KindOf(code string) *Kind {
	for _, k := range Kinds {
		if k.Code == code {
			return k
		}
	}
	return nil
}

// kindOfStatus is the kind of an HTTP error that says only its status (from
// echo: an unknown route, a method, a body limit): the kind of that status
// without a parent; nil for a status no kind has.
func kindOfStatus(status int) *Kind {
	for _, k := range Kinds {
		if k.Status == status && k.parent == nil {
			return k
		}
	}
	return nil
}

// kindOf is the first kind errors.As finds in err, nil when it wraps none.
// A sentinel wraps one kind, the most specific that fits it.
func kindOf(err error) *Kind {
	var k *Kind
	if errors.As(err, &k) {
		return k
	}
	return nil
}
