package replay

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/ceprops"
)

// Quarantine row statuses, and the filter value that takes them all.
const (
	Quarantined = "QUARANTINED"
	Replayed    = "REPLAYED"
	Discarded   = "DISCARDED"
	AnyStatus   = "ALL"
)

// Bounds of a listing or a bulk replay.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Filter selects quarantined messages. The zero Filter lists the open
// messages of every consumer, oldest first, up to [DefaultLimit].
type Filter struct {
	Consumer   string `json:"consumer,omitempty"`
	ErrorClass string `json:"error_class,omitempty"`
	// ErrorCode is an exact code, or a prefix followed by "*"
	// ("envelope.*").
	ErrorCode string `json:"error_code,omitempty"`
	// Status is QUARANTINED when empty; ALL takes every status. Bulk
	// replays take only QUARANTINED.
	Status string    `json:"status,omitempty"`
	Since  time.Time `json:"since,omitzero"` // received at or after
	Until  time.Time `json:"until,omitzero"` // received before
	Limit  int       `json:"limit,omitempty"`
}

// normalize applies the defaults and checks the bounds.
func (f Filter) normalize() (Filter, error) {
	f.Status = strings.ToUpper(strings.TrimSpace(f.Status))
	switch f.Status {
	case "":
		f.Status = Quarantined
	case Quarantined, Replayed, Discarded, AnyStatus:
	default:
		return f, invalidf("status %q is not one of %s, %s, %s or %s", f.Status, Quarantined, Replayed, Discarded, AnyStatus)
	}
	switch {
	case f.Limit == 0:
		f.Limit = DefaultLimit
	case f.Limit < 0 || f.Limit > MaxLimit:
		return f, invalidf("limit must be from 1 to %d, got %d", MaxLimit, f.Limit)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, invalidf("since (%s) must be before until (%s)", f.Since.UTC().Format(time.RFC3339), f.Until.UTC().Format(time.RFC3339))
	}
	if strings.Contains(strings.TrimSuffix(f.ErrorCode, "*"), "*") {
		return f, invalidf("error code %q: '*' may only end a prefix, as in envelope.*", f.ErrorCode)
	}
	return f, nil
}

// where renders the filter as a WHERE clause and its arguments.
func (f Filter) where() (string, []any) {
	var (
		conds []string
		args  []any
	)
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if f.Status != AnyStatus {
		add("status = $?", f.Status)
	}
	if f.Consumer != "" {
		add("consumer_name = $?", f.Consumer)
	}
	if f.ErrorClass != "" {
		add("error_class = $?", f.ErrorClass)
	}
	if prefix, ok := strings.CutSuffix(f.ErrorCode, "*"); ok {
		if prefix != "" {
			add(`starts_with(error_code, $?)`, prefix)
		}
	} else if f.ErrorCode != "" {
		add("error_code = $?", f.ErrorCode)
	}
	if !f.Since.IsZero() {
		add("received_at >= $?", f.Since)
	}
	if !f.Until.IsZero() {
		add("received_at < $?", f.Until)
	}
	if len(conds) == 0 {
		return "true", nil
	}
	return strings.Join(conds, " AND "), args
}

// messageColumns are what scanMessage reads.
const messageColumns = `quarantine_id, consumer_name, coalesce(event_id::text, ''), message_id, topic, coalesce(tag, ''),
	error_class, error_code, coalesce(error_detail, ''), delivery_attempt, source, status, received_at, properties`

// row is a quarantine row with what is needed to replay it.
type row struct {
	Message
	props map[string]string
	body  []byte
}

func scanMessage(r pgx.CollectableRow) (row, error) {
	var m row
	err := r.Scan(&m.QuarantineID, &m.Consumer, &m.EventID, &m.MessageID, &m.Topic, &m.Tag,
		&m.ErrorClass, &m.ErrorCode, &m.ErrorDetail, &m.DeliveryAttempt, &m.Source, &m.Status, &m.ReceivedAt, &m.props)
	if err != nil {
		return row{}, fmt.Errorf("read quarantine row: %w", err)
	}
	m.derive()
	return m, nil
}

// derive fills what a row's properties tell.
func (m *row) derive() {
	m.ReceivedAt = m.ReceivedAt.UTC()
	m.EventType = m.props[ceprops.Prefix+"type"]
	m.AggregateID = m.props[ceprops.Prefix+"subject"]
	if m.EventType == "" && strings.Contains(m.Tag, ".") {
		m.EventType = m.Tag // tags are event types except on asset.postprocess
	}
}

// List returns the quarantined messages f selects, oldest first.
func List(ctx context.Context, db DB, f Filter) ([]Message, error) {
	f, err := f.normalize()
	if err != nil {
		return nil, err
	}
	where, args := f.where()
	rows, err := db.Query(ctx, `SELECT `+messageColumns+` FROM message_quarantine WHERE `+where+`
		ORDER BY received_at, quarantine_id LIMIT `+strconv.Itoa(f.Limit), args...)
	if err != nil {
		return nil, fmt.Errorf("list quarantine: %w", err)
	}
	found, err := pgx.CollectRows(rows, scanMessage)
	if err != nil {
		return nil, err
	}
	out := make([]Message, len(found))
	for i, r := range found {
		out[i] = r.Message
	}
	return out, nil
}

// Show returns one quarantined message whole: its properties, its body,
// the event it carries, and the replays planned for it.
func Show(ctx context.Context, db DB, quarantineID uuid.UUID) (MessageDetail, error) {
	r, err := readRow(ctx, db, quarantineID, false)
	if err != nil {
		return MessageDetail{}, err
	}
	q := MessageDetail{Message: r.Message, Properties: r.props}
	if utf8.Valid(r.body) {
		q.Body, q.BodyEncoding = string(r.body), "utf-8"
	} else {
		q.Body, q.BodyEncoding = base64.StdEncoding.EncodeToString(r.body), "base64"
	}
	if env, err := decodeEnvelope(r.props, r.body); err != nil {
		q.EventError = err.Error()
	} else {
		q.Event = eventView(env)
	}
	q.Replays, err = replaysOf(ctx, db, r)
	if err != nil {
		return MessageDetail{}, err
	}
	return q, nil
}

// readRow reads a quarantine row with its body, locking it when lock is set.
func readRow(ctx context.Context, q querier, id uuid.UUID, lock bool) (row, error) {
	sql := `SELECT ` + messageColumns + `, body FROM message_quarantine WHERE quarantine_id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	rows, err := q.Query(ctx, sql, id)
	if err != nil {
		return row{}, fmt.Errorf("read quarantine row %s: %w", id, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanWithBody)
	if errors.Is(err, pgx.ErrNoRows) {
		return row{}, fmt.Errorf("%w: no quarantined message %s", ErrNotFound, id)
	}
	return r, err
}

func scanWithBody(r pgx.CollectableRow) (row, error) {
	var m row
	err := r.Scan(&m.QuarantineID, &m.Consumer, &m.EventID, &m.MessageID, &m.Topic, &m.Tag,
		&m.ErrorClass, &m.ErrorCode, &m.ErrorDetail, &m.DeliveryAttempt, &m.Source, &m.Status, &m.ReceivedAt, &m.props, &m.body)
	if err != nil {
		return row{}, fmt.Errorf("read quarantine row: %w", err)
	}
	m.derive()
	return m, nil
}

// maxAgeDays bounds an age in days, far from overflowing a Duration.
const maxAgeDays = 100 * 365

// ParseTime reads a time given on a command line or in a query string:
// RFC 3339 ("2026-11-30T08:00:00Z"), or an age before now ("90m", "24h",
// "7d").
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= maxAgeDays {
			return now.Add(-time.Duration(n) * 24 * time.Hour).UTC(), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, invalidf("time %q is neither RFC 3339 (2026-11-30T08:00:00Z) nor an age such as 90m, 24h or 7d", s)
}

// groupOf finds the catalog group of a quarantine row's consumer.
func groupOf(consumer string) (catalog.Group, bool) {
	g, err := catalog.GroupByName(consumer)
	return g, err == nil && g.Name == consumer
}
