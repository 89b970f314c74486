package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/tenant"
)

// The admin endpoints of quarantine and replay (docs/design.md §7), for keys of
// role admin only. They are thin: shared/quarantine lists and shared/replay
// does the rest, the same calls as `go run ./adapter quarantine` and `go run
// ./adapter replay`.
//
//	GET  /v1/admin/quarantine                  list (?consumer, error_class, error_code, status, since, until, limit)
//	GET  /v1/admin/quarantine/{id}             one message whole, with its replays
//	POST /v1/admin/replays/plan                dry run {event_id | quarantine_id, consumer?, operator?}
//	GET  /v1/admin/replays/{id}                a replay and its audit trail
//	POST /v1/admin/quarantine/{id}/discard     {ticket, operator, reason}: closed for good, never replayed
//	POST /v1/admin/replays/{id}/approve        {ticket, operator, reason}
//	POST /v1/admin/replays/{id}/execute        {operator?}
//	POST /v1/admin/replays/bulk/plan           {consumer, error_class?, error_code?, since?, until?, limit?}
//	POST /v1/admin/replays/bulk/approve        the same filter, ticket, operator, reason, expect?
//	POST /v1/admin/replays/bulk/execute        {ticket, consumer?, operator?}
//
// The operator recorded in message_replays is the person named in the
// body followed by the admin key that made the call, so the audit names
// both who and with which credential.

// Error codes of the replay endpoints.
const (
	CodeAmbiguousEvent      = "ambiguous_event"       // 409: the event is quarantined for several consumer groups; name one
	CodeReplayRefused       = "replay_refused"        // 409: the verdict refuses the replay; nothing is sent
	CodeReplayOutsideWindow = "replay_outside_window" // 409: refused, the event is older than REPLAY_WINDOW and its inbox rows may be pruned
	CodeReplayNotApproved   = "replay_not_approved"   // 409: execute of a dry run that was never approved
	CodeReplayDecided       = "replay_decided"        // 409: approve of a replay already approved or refused
	CodeReplaySamePlanner   = "replay_same_planner"   // 403: approve with the api key that planned the replay
	CodeQuarantineChanged   = "quarantine_changed"    // 409: a bulk approval's expect no longer matches
	CodeQuarantineClosed    = "quarantine_closed"     // 409: discard of a message replayed or discarded already
)

const (
	// bulkTimeout bounds a bulk call (up to quarantine.MaxLimit messages),
	// inside the API server's 60 s write timeout. A bulk step that runs out
	// keeps what it committed, one message at a time: call it again, or
	// lower the limit.
	bulkTimeout = 50 * time.Second
	// maxOperatorName leaves room for the key id appended to it.
	maxOperatorName = 120
)

// listQuarantineParams are the query parameters GET /v1/admin/quarantine takes.
var listQuarantineParams = []string{"consumer", "error_class", "category", "error_code", "status", "since", "until", "limit"}

// listQuarantine serves GET /v1/admin/quarantine.
func (s *Server) listQuarantine(w http.ResponseWriter, r *http.Request, _ tenant.Principal) *apiError {
	q := r.URL.Query()
	for name := range q {
		if !slices.Contains(listQuarantineParams, name) {
			return errorf(http.StatusBadRequest, CodeInvalidField, "unknown query parameter %q; the accepted ones are %s", truncate(name, 64), joinComma(listQuarantineParams))
		}
	}
	f := quarantine.Filter{Consumer: q.Get("consumer"), ErrorClass: q.Get("error_class"), Category: quarantine.Category(q.Get("category")),
		ErrorCode: q.Get("error_code"), Status: quarantine.Status(q.Get("status"))}
	if e := s.times(q, &f); e != nil {
		return e
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return errorf(http.StatusBadRequest, CodeInvalidField, "limit must be an integer from 1 to %d, not %q", quarantine.MaxLimit, truncate(v, 32))
		}
		f.Limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	msgs, err := quarantine.List(ctx, s.pool, f)
	if err != nil {
		return s.replayError(ctx, "list quarantine", err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": msgs})
	return nil
}

// times reads since and until, RFC 3339 or an age such as 24h.
func (s *Server) times(q url.Values, f *quarantine.Filter) *apiError {
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := quarantine.ParseTime(v, s.now())
			if err != nil {
				return errorf(http.StatusBadRequest, CodeInvalidField, "%s: %s", p.name, reasonOf(err))
			}
			*p.dst = t
		}
	}
	return nil
}

// showQuarantine serves GET /v1/admin/quarantine/{id}.
func (s *Server) showQuarantine(w http.ResponseWriter, r *http.Request, _ tenant.Principal) *apiError {
	id, e := pathID(r, "quarantine id", "GET /v1/admin/quarantine")
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	q, err := s.replay.Show(ctx, id)
	if err != nil {
		return s.replayError(ctx, "show quarantined message", err)
	}
	writeJSON(w, http.StatusOK, q)
	return nil
}

// discardQuarantine serves POST /v1/admin/quarantine/{id}/discard.
func (s *Server) discardQuarantine(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	id, e := pathID(r, "quarantine id", "GET /v1/admin/quarantine")
	if e != nil {
		return e
	}
	var d replay.Decision
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &d); e != nil {
		return e
	}
	if d.Operator, e = operatorOf(p, d.Operator, true); e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	out, err := s.replay.Discard(ctx, id, d)
	if err != nil {
		return s.replayError(ctx, "discard quarantined message", err)
	}
	s.audit(ctx, "quarantine discarded", p, slog.String("quarantine_id", id.String()), slog.String("ticket", d.Ticket),
		slog.String("consumer_group", out.Consumer), slog.Int64("rows", out.Rows))
	writeJSON(w, http.StatusOK, out)
	return nil
}

type planBody struct {
	EventID      string `json:"event_id"`
	QuarantineID string `json:"quarantine_id"`
	Consumer     string `json:"consumer"`
	Operator     string `json:"operator"`
}

// planReplay serves POST /v1/admin/replays/plan: the dry run, recorded.
func (s *Server) planReplay(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	var b planBody
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &b); e != nil {
		return e
	}
	if (b.EventID == "") == (b.QuarantineID == "") {
		return errorf(http.StatusBadRequest, CodeInvalidField, "send exactly one of event_id and quarantine_id")
	}
	raw, field := b.EventID, "event_id"
	if raw == "" {
		raw, field = b.QuarantineID, "quarantine_id"
	}
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		return errorf(http.StatusBadRequest, CodeInvalidField, "%s %q is not a UUID", field, truncate(raw, 64))
	}
	operator, e := operatorOf(p, b.Operator, false)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	rep, err := s.replay.Plan(ctx, replay.Ref{ID: id, Consumer: b.Consumer}, operator)
	if err != nil {
		return s.replayError(ctx, "plan replay", err)
	}
	s.audit(ctx, "replay planned", p, slog.String("replay_id", rep.ReplayID.String()),
		slog.String("event_id", rep.Message.EventID), slog.String("consumer_group", rep.Message.Consumer),
		slog.String("verdict", string(rep.Verdict.Action)))
	w.Header().Set("Location", "/v1/admin/replays/"+rep.ReplayID.String())
	writeJSON(w, http.StatusCreated, rep)
	return nil
}

// getReplay serves GET /v1/admin/replays/{id}.
func (s *Server) getReplay(w http.ResponseWriter, r *http.Request, _ tenant.Principal) *apiError {
	id, e := pathID(r, "replay id", "POST /v1/admin/replays/plan")
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	rp, err := s.replay.Get(ctx, id)
	if err != nil {
		return s.replayError(ctx, "read replay", err)
	}
	writeJSON(w, http.StatusOK, rp)
	return nil
}

// approveReplay serves POST /v1/admin/replays/{id}/approve.
func (s *Server) approveReplay(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	id, e := pathID(r, "replay id", "POST /v1/admin/replays/plan")
	if e != nil {
		return e
	}
	var d replay.Decision
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &d); e != nil {
		return e
	}
	if d.Operator, e = operatorOf(p, d.Operator, true); e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	rep, err := s.replay.Approve(ctx, id, d)
	if err != nil {
		if errors.Is(err, replay.ErrRefused) {
			s.audit(ctx, "replay refused", p, slog.String("replay_id", id.String()), slog.String("ticket", d.Ticket), slog.String("verdict_code", rep.Verdict.Code))
		}
		return s.replayError(ctx, "approve replay", err)
	}
	s.audit(ctx, "replay approved", p, slog.String("replay_id", id.String()), slog.String("ticket", d.Ticket),
		slog.String("event_id", rep.Message.EventID), slog.String("consumer_group", rep.Message.Consumer))
	writeJSON(w, http.StatusOK, rep)
	return nil
}

type executeBody struct {
	Operator string `json:"operator"`
}

// executeReplay serves POST /v1/admin/replays/{id}/execute. The body is
// optional.
func (s *Server) executeReplay(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	id, e := pathID(r, "approval id", "POST /v1/admin/replays/{id}/approve")
	if e != nil {
		return e
	}
	var b executeBody
	if r.ContentLength != 0 {
		if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &b); e != nil {
			return e
		}
	}
	operator, e := operatorOf(p, b.Operator, false)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	x, err := s.replay.Execute(ctx, id, operator)
	if err != nil {
		return s.replayError(ctx, "execute replay", err)
	}
	if !x.AlreadyExecuted {
		s.audit(ctx, "replay executed", p, slog.String("replay_id", id.String()), slog.String("event_id", x.OriginalEventID.String()),
			slog.String("replay_event_id", x.ReplayEventID.String()), slog.String("consumer_group", x.Consumer))
	}
	writeJSON(w, http.StatusOK, x)
	return nil
}

type bulkBody struct {
	Consumer   string `json:"consumer"`
	ErrorClass string `json:"error_class"`
	ErrorCode  string `json:"error_code"`
	Since      string `json:"since"`
	Until      string `json:"until"`
	Limit      int    `json:"limit"`
	// Approval only.
	Ticket   string `json:"ticket"`
	Operator string `json:"operator"`
	Reason   string `json:"reason"`
	Expect   int    `json:"expect"`
}

func (s *Server) bulkFilter(b bulkBody) (quarantine.Filter, *apiError) {
	f := quarantine.Filter{Consumer: b.Consumer, ErrorClass: b.ErrorClass, ErrorCode: b.ErrorCode, Limit: b.Limit}
	return f, s.times(url.Values{"since": {b.Since}, "until": {b.Until}}, &f)
}

// planBulk serves POST /v1/admin/replays/bulk/plan: the dry-run summary.
func (s *Server) planBulk(w http.ResponseWriter, r *http.Request, _ tenant.Principal) *apiError {
	var b bulkBody
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &b); e != nil {
		return e
	}
	if b.Ticket != "" || b.Operator != "" || b.Reason != "" || b.Expect != 0 {
		return errorf(http.StatusBadRequest, CodeInvalidField, "ticket, operator, reason and expect belong to POST /v1/admin/replays/bulk/approve; a dry run takes the filter only")
	}
	f, e := s.bulkFilter(b)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), bulkTimeout)
	defer cancel()
	rep, err := s.replay.PlanBulk(ctx, f)
	if err != nil {
		return s.replayError(ctx, "plan bulk replay", err)
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// approveBulk serves POST /v1/admin/replays/bulk/approve.
func (s *Server) approveBulk(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	var b bulkBody
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &b); e != nil {
		return e
	}
	f, e := s.bulkFilter(b)
	if e != nil {
		return e
	}
	if b.Expect < 0 {
		return errorf(http.StatusBadRequest, CodeInvalidField, "expect must not be negative")
	}
	d := replay.Decision{Ticket: b.Ticket, Reason: b.Reason}
	if d.Operator, e = operatorOf(p, b.Operator, true); e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), bulkTimeout)
	defer cancel()
	rep, err := s.replay.ApproveBulk(ctx, f, d, b.Expect)
	if err != nil {
		return s.replayError(ctx, "approve bulk replay", err)
	}
	s.audit(ctx, "bulk replay approved", p, slog.String("ticket", d.Ticket), slog.String("consumer_group", f.Consumer),
		slog.Int("approved", rep.Approved), slog.Int("rejected", rep.Rejected))
	writeJSON(w, http.StatusOK, rep)
	return nil
}

type bulkExecuteBody struct {
	Ticket   string `json:"ticket"`
	Consumer string `json:"consumer"`
	Operator string `json:"operator"`
}

// executeBulk serves POST /v1/admin/replays/bulk/execute: every approval of
// a ticket. Executions that failed on our side are listed without their
// cause (it is logged) and stay APPROVED for the next call.
func (s *Server) executeBulk(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	var b bulkExecuteBody
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &b); e != nil {
		return e
	}
	operator, e := operatorOf(p, b.Operator, false)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), bulkTimeout)
	defer cancel()
	x, err := s.replay.ExecuteBulk(ctx, replay.ExecuteBulkParams{Ticket: b.Ticket, Consumer: b.Consumer, Operator: operator})
	if err != nil {
		return s.replayError(ctx, "execute bulk replay", err)
	}
	for i, f := range x.Failed {
		s.log.ErrorContext(ctx, "bulk replay execution failed", slog.String("replay_id", f.ReplayID.String()),
			slog.String("error", f.Reason), slog.String("request_id", requestID(ctx)))
		x.Failed[i].Reason = "internal error; it stays APPROVED: call again to retry"
	}
	s.audit(ctx, "bulk replay executed", p, slog.String("ticket", b.Ticket), slog.Int("executed", len(x.Executed)),
		slog.Int("refused", len(x.Refused)), slog.Int("failed", len(x.Failed)))
	writeJSON(w, http.StatusOK, x)
	return nil
}

// operatorOf is the operator recorded for a call: the person the body
// names, and the admin key that made it.
func operatorOf(p tenant.Principal, name string, required bool) (string, *apiError) {
	name = strings.TrimSpace(name)
	switch {
	case name == "" && required:
		return "", errorf(http.StatusBadRequest, CodeInvalidField, "operator is required: the person who decides, recorded with the ticket and the reason")
	case len(name) > maxOperatorName:
		return "", errorf(http.StatusBadRequest, CodeInvalidField, "operator is longer than %d bytes", maxOperatorName)
	case name == "":
		return "api key " + p.KeyID.String(), nil
	}
	return name + " (api key " + p.KeyID.String() + ")", nil
}

// pathID parses the {id} of the path.
func pathID(r *http.Request, what, from string) (uuid.UUID, *apiError) {
	raw := r.PathValue("id")
	id, err := uuid.Parse(raw)
	if err != nil || len(raw) != 36 {
		return uuid.Nil, errorf(http.StatusBadRequest, CodeInvalidID, "%q is not a %s; it is a UUID as returned by %s", truncate(raw, 64), what, from)
	}
	return id, nil
}

// replayError maps an error of package replay or quarantine to a
// response: the operator's mistakes with their reason, ours as a 500.
func (s *Server) replayError(ctx context.Context, what string, err error) *apiError {
	switch {
	case errors.Is(err, replay.ErrInvalid), errors.Is(err, quarantine.ErrInvalid):
		return errorf(http.StatusBadRequest, CodeInvalidField, "%s", reasonOf(err))
	case errors.Is(err, replay.ErrNotFound):
		return errorf(http.StatusNotFound, CodeNotFound, "%s", err.Error())
	case errors.Is(err, replay.ErrAmbiguous):
		return errorf(http.StatusConflict, CodeAmbiguousEvent, "%s", err.Error())
	case errors.Is(err, replay.ErrOutsideWindow): // before ErrRefused, which it wraps too
		return errorf(http.StatusConflict, CodeReplayOutsideWindow, "%s", err.Error())
	case errors.Is(err, replay.ErrRefused):
		return errorf(http.StatusConflict, CodeReplayRefused, "%s", err.Error())
	case errors.Is(err, replay.ErrNotApproved):
		return errorf(http.StatusConflict, CodeReplayNotApproved, "%s", err.Error())
	case errors.Is(err, replay.ErrSamePlanner):
		return errorf(http.StatusForbidden, CodeReplaySamePlanner, "%s", err.Error())
	case errors.Is(err, replay.ErrDecided):
		return errorf(http.StatusConflict, CodeReplayDecided, "%s", err.Error())
	case errors.Is(err, replay.ErrChanged):
		return errorf(http.StatusConflict, CodeQuarantineChanged, "%s", err.Error())
	case errors.Is(err, replay.ErrNotOpen):
		return errorf(http.StatusConflict, CodeQuarantineClosed, "%s", err.Error())
	}
	return s.internal(ctx, what, err)
}

// reasonOf is an invalid request's reason without the sentinels' words.
func reasonOf(err error) string {
	msg := strings.TrimPrefix(err.Error(), replay.ErrInvalid.Error()+": ")
	return strings.TrimPrefix(msg, quarantine.ErrInvalid.Error()+": ")
}

// audit logs an operator step with the key that made it; message_replays
// holds the record, the log ties it to the request.
func (s *Server) audit(ctx context.Context, msg string, p tenant.Principal, attrs ...slog.Attr) {
	attrs = append(attrs, slog.String("by_tenant_id", p.TenantID.String()), slog.String("by_key_id", p.KeyID.String()),
		slog.String("request_id", requestID(ctx)))
	s.log.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
}
