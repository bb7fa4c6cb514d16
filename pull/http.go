package pull

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/subscriptions"
)

// Routes registers the pull endpoints under g (/v1).
func (s *Service) Routes(g *echo.Group) {
	base := "/rooms/:roomId/subscriptions/:subscriptionId"
	// Pulling is the subscriber's own business (and the admin's).
	own := auth.InSubscription(api.RoleSubscriber)
	auth.Handle(g, http.MethodPost, base+"/pull", s.pull, own)
	auth.Handle(g, http.MethodPost, base+"/ack", s.ack, own)
	auth.Handle(g, http.MethodPost, base+"/nack", s.nack, own)
	auth.Handle(g, http.MethodPost, base+"/modify-ack-deadline", s.modify, own)
}

type pullRequest struct {
	MaxMessages *int   `json:"maxMessages"`
	WaitMs      *int64 `json:"waitMs"`
}

// MessagesResponse is the answer to a pull.
type MessagesResponse struct {
	Messages []Message `json:"messages"`
}

func (s *Service) pull(c echo.Context) error {
	var req pullRequest
	if err := api.DecodeOptional(c, &req); err != nil {
		return err
	}
	var probs api.Problems
	n := DefaultMaxMessages
	if req.MaxMessages != nil {
		if n = *req.MaxMessages; n < 1 || n > MaxMessages {
			probs.Add("maxMessages", fmt.Sprintf("must be from 1 to %d", MaxMessages))
		}
	}
	var wait time.Duration
	if req.WaitMs != nil {
		if *req.WaitMs < 0 || *req.WaitMs > MaxWait.Milliseconds() {
			probs.Add("waitMs", fmt.Sprintf("must be from 0 to %d", MaxWait.Milliseconds()))
		} else {
			wait = time.Duration(*req.WaitMs) * time.Millisecond
		}
	}
	if err := probs.Err(); err != nil {
		return err
	}
	msgs, err := s.Pull(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"), n, max(wait, linger))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, MessagesResponse{Messages: msgs})
}

type ackRequest struct {
	AckIDs []string `json:"ackIds"`
	// AckDeadlineMs is for modify-ack-deadline only.
	AckDeadlineMs *int64 `json:"ackDeadlineMs,omitempty"`
}

// ResultsResponse is the answer to an ack, a nack or a modify-ack-deadline:
// one result per ack id, in request order.
type ResultsResponse struct {
	Results []Result `json:"results"`
}

func decodeAck(c echo.Context, deadline bool) (ackRequest, error) {
	var req ackRequest
	if err := api.Decode(c, &req); err != nil {
		return req, err
	}
	var probs api.Problems
	if len(req.AckIDs) == 0 || len(req.AckIDs) > MaxAckIDs {
		probs.Add("ackIds", fmt.Sprintf("must list 1 to %d ack ids", MaxAckIDs))
	}
	switch {
	case deadline && req.AckDeadlineMs == nil:
		probs.Add("ackDeadlineMs", "is required")
	case deadline && (*req.AckDeadlineMs < 0 || *req.AckDeadlineMs > subscriptions.MaxAckDeadline.Milliseconds()):
		probs.Add("ackDeadlineMs", fmt.Sprintf("must be from 0 to %d", subscriptions.MaxAckDeadline.Milliseconds()))
	case !deadline && req.AckDeadlineMs != nil:
		probs.Add("ackDeadlineMs", "belongs to modify-ack-deadline")
	}
	return req, probs.Err()
}

func (s *Service) ack(c echo.Context) error {
	req, err := decodeAck(c, false)
	if err != nil {
		return err
	}
	res, err := s.Ack(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"), req.AckIDs)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ResultsResponse{Results: res})
}

func (s *Service) nack(c echo.Context) error {
	req, err := decodeAck(c, false)
	if err != nil {
		return err
	}
	res, err := s.Nack(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"), req.AckIDs)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ResultsResponse{Results: res})
}

func (s *Service) modify(c echo.Context) error {
	req, err := decodeAck(c, true)
	if err != nil {
		return err
	}
	d := time.Duration(*req.AckDeadlineMs) * time.Millisecond
	res, err := s.ModifyAckDeadline(c.Request().Context(), c.Param("roomId"), c.Param("subscriptionId"), req.AckIDs, d)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ResultsResponse{Results: res})
}
