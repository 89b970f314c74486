package quarantine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// Status is the state of a quarantine row: its status column. A row is
// QUARANTINED (open) until it is REPLAYED or DISCARDED, for good.
type Status string

// The statuses of a row, and the filter value that takes them all.
const (
	Quarantined Status = "QUARANTINED"
	Replayed    Status = "REPLAYED"
	Discarded   Status = "DISCARDED"
	AnyStatus   Status = "ALL"
)

// Bounds of a listing or a bulk replay.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// ErrInvalid: a filter or a time is malformed; the error says what to
// change.
var ErrInvalid = errors.New("invalid quarantine filter")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Filter selects quarantined messages. The zero Filter lists the open
// messages of every consumer, oldest first, up to [DefaultLimit].
type Filter struct {
	Consumer   string `json:"consumer,omitempty"`
	ErrorClass string `json:"error_class,omitempty"`
	// Category is one of [Categories]; empty takes them all.
	Category Category `json:"category,omitempty"`
	// ErrorCode is an exact code, or a prefix followed by "*"
	// ("envelope.*").
	ErrorCode string `json:"error_code,omitempty"`
	// Status is QUARANTINED when empty; ALL takes every status. Bulk
	// replays take only QUARANTINED.
	Status Status    `json:"status,omitempty"`
	Since  time.Time `json:"since,omitzero"` // received at or after
	Until  time.Time `json:"until,omitzero"` // received before
	Limit  int       `json:"limit,omitempty"`
}

// Normalize applies the defaults and checks the bounds; an error wraps
// [ErrInvalid].
func (f Filter) Normalize() (Filter, error) {
	f.Status = Status(strings.ToUpper(strings.TrimSpace(string(f.Status))))
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
	f.Category = Category(strings.ToUpper(strings.TrimSpace(string(f.Category))))
	if f.Category != "" && !slices.Contains(Categories(), f.Category) {
		return f, invalidf("category %q is not one of %v", f.Category, Categories())
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
	if f.Category != "" {
		add("category = $?", string(f.Category))
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

// List returns the quarantined messages f selects, oldest first, without
// their bodies.
func List(ctx context.Context, db pg.Querier, f Filter) ([]Message, error) {
	f, err := f.Normalize()
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

// Selection is what a filter selects for a bulk replay: every matching
// row counted, and one row per event to act on.
type Selection struct {
	// Matched counts the rows f selects, and Events the events among them:
	// the copies of one event count once.
	Matched, Events int
	// Oldest holds each event's oldest matching row, with its body, oldest
	// first, up to the filter's limit.
	Oldest []Stored
}

// SelectEvents counts what f selects and reads the oldest row of each
// event, up to f's limit. f must be normalized.
func SelectEvents(ctx context.Context, q pg.Querier, f Filter) (Selection, error) {
	var s Selection
	where, args := f.where()
	// A row without a readable event id is an event of its own.
	const event = `coalesce(event_id::text, quarantine_id::text)`
	if err := q.QueryRow(ctx, `SELECT count(*), count(DISTINCT `+event+`) FROM message_quarantine WHERE `+where, args...).
		Scan(&s.Matched, &s.Events); err != nil {
		return Selection{}, fmt.Errorf("count quarantine: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT `+messageColumns+`, body FROM message_quarantine WHERE quarantine_id IN (
			SELECT DISTINCT ON (`+event+`) quarantine_id FROM message_quarantine WHERE `+where+`
			ORDER BY `+event+`, received_at, quarantine_id)
		ORDER BY received_at, quarantine_id LIMIT `+strconv.Itoa(f.Limit), args...)
	if err != nil {
		return Selection{}, fmt.Errorf("select quarantine: %w", err)
	}
	if s.Oldest, err = pgx.CollectRows(rows, scanStored); err != nil {
		return Selection{}, err
	}
	return s, nil
}

// maxAgeDays bounds an age in days, far from overflowing a Duration.
const maxAgeDays = 100 * 365

// ParseTime reads a time given on a command line or in a query string:
// RFC 3339 ("2026-11-30T08:00:00Z"), or an age before now ("90m", "24h",
// "7d"). An error wraps [ErrInvalid].
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

// Open counts the open messages of one consumer group by category: how
// many, how many are past the group's handling deadline at now, and when
// the oldest first failed.
type Open struct {
	Consumer     string
	Category     Category
	Count        int
	Overdue      int
	OldestFailed time.Time
}

// OpenCounts reads the open messages of consumer (every consumer when
// empty) by category. handleWithin is the group's deadline (0: none is
// overdue).
func OpenCounts(ctx context.Context, db pg.Querier, consumer string, handleWithin time.Duration) ([]Open, error) {
	deadline := "false"
	if handleWithin > 0 {
		deadline = "first_failed_at < now() - interval '1 millisecond' * " + strconv.FormatInt(handleWithin.Milliseconds(), 10)
	}
	rows, err := db.Query(ctx, `SELECT consumer_name, category, count(*), count(*) FILTER (WHERE `+deadline+`), min(first_failed_at)
		FROM message_quarantine WHERE status = $2 AND ($1 = '' OR consumer_name = $1)
		GROUP BY consumer_name, category ORDER BY consumer_name, category`, consumer, Quarantined)
	if err != nil {
		return nil, fmt.Errorf("count open quarantine: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Open, error) {
		var o Open
		err := r.Scan(&o.Consumer, &o.Category, &o.Count, &o.Overdue, &o.OldestFailed)
		return o, err
	})
}
