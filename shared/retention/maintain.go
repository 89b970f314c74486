package retention

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/pg"
)

// Defaults of [Params].
const (
	// DefaultAhead is how many days after today have partitions: maintenance
	// may miss that many days of ticks before events go to the default.
	DefaultAhead = 3
	// DefaultLockTimeout bounds every lock wait of a step: the longest a
	// maintenance run can hold writers queued behind it.
	DefaultLockTimeout = 500 * time.Millisecond
)

// Params tunes [Maintain]. The zero value is the production setting.
type Params struct {
	// Window is the replay window (REPLAY_WINDOW); config.DefaultReplayWindow
	// when zero.
	Window time.Duration
	// Ahead is how many days after today get partitions; DefaultAhead when
	// zero.
	Ahead int
	// LockTimeout bounds each lock wait; DefaultLockTimeout when zero.
	LockTimeout time.Duration
	// Now is the time maintenance runs at; the database's clock when zero.
	// Tests move it.
	Now    time.Time
	Logger *slog.Logger
}

func (p Params) withDefaults() Params {
	p.Window = cmp.Or(p.Window, config.DefaultReplayWindow)
	p.Ahead = cmp.Or(p.Ahead, DefaultAhead)
	p.LockTimeout = cmp.Or(p.LockTimeout, DefaultLockTimeout)
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	return p
}

// table is a partitioned log and what tells its rows' age.
type table struct {
	name string
	// written is the column that says when a row was written.
	written string
	// published: the rows have published_at, and an unpublished row keeps
	// its partition.
	published bool
}

var tables = []table{
	{name: "outbox_events", written: "created_at", published: true},
	{name: "inbox_dedup", written: "processed_at"},
}

// Report is what one [Maintain] run did, per table.
type Report struct {
	Tables []TableReport `json:"tables"`
}

// TableReport is what a run did to one table.
type TableReport struct {
	Table string `json:"table"`
	// Created are the partitions attached, Moved the rows they took over
	// from the default partition.
	Created []string `json:"created,omitempty"`
	Moved   int64    `json:"moved,omitempty"`
	Dropped []string `json:"dropped,omitempty"`
	// Kept are partitions past the window that were not dropped, and why.
	Kept []Kept `json:"kept,omitempty"`
	// Busy are the steps given up because a lock was not free within
	// LockTimeout; the next run tries them again.
	Busy []string `json:"busy,omitempty"`
	// DefaultRows counts the default partition's rows, which are never
	// dropped automatically.
	DefaultRows int64 `json:"default_rows"`
}

// Why a partition past the window is kept.
const (
	// KeptUnpublished: outbox rows in it are not published yet.
	KeptUnpublished = "unpublished"
	// KeptRecent: a row in it was written within the window (an id that
	// does not carry its time).
	KeptRecent = "written_within_window"
)

// Kept is a partition past the window that stays.
type Kept struct {
	Partition string `json:"partition"`
	Reason    string `json:"reason"`
	// Rows counts the unpublished rows (KeptUnpublished).
	Rows int64 `json:"rows,omitempty"`
}

// LogValue is the report in a log line: counts, and the names of what
// changed.
func (r Report) LogValue() slog.Value {
	var attrs []slog.Attr
	for _, t := range r.Tables {
		a := []any{slog.Int64("default_rows", t.DefaultRows)}
		if len(t.Created) > 0 {
			a = append(a, slog.Any("created", t.Created), slog.Int64("moved", t.Moved))
		}
		if len(t.Dropped) > 0 {
			a = append(a, slog.Any("dropped", t.Dropped))
		}
		if len(t.Kept) > 0 {
			a = append(a, slog.Int("kept", len(t.Kept)))
		}
		if len(t.Busy) > 0 {
			a = append(a, slog.Int("busy", len(t.Busy)))
		}
		attrs = append(attrs, slog.Group(t.Table, a...))
	}
	return slog.GroupValue(attrs...)
}

// Maintain creates the partitions that are missing from the start of the
// replay window to p.Ahead days after today, and drops every partition the
// package documentation allows to drop. A step that cannot get its locks
// within p.LockTimeout is reported in Busy, not as an error.
func Maintain(ctx context.Context, db pg.DB, p Params) (Report, error) {
	p = p.withDefaults()
	now := p.Now
	if now.IsZero() {
		if err := db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			return Report{}, fmt.Errorf("read the database clock: %w", err)
		}
	}
	now = now.UTC()
	var rep Report
	for _, t := range tables {
		tr, err := maintainTable(ctx, db, t, p, now)
		rep.Tables = append(rep.Tables, tr)
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func maintainTable(ctx context.Context, db pg.DB, t table, p Params, now time.Time) (TableReport, error) {
	tr := TableReport{Table: t.name}
	parts, err := partitions(ctx, db, t.name)
	if err != nil {
		return tr, err
	}
	horizon := now.Add(-p.Window)
	last := now.Truncate(Day).Add(time.Duration(p.Ahead) * Day)
	for day := horizon.Truncate(Day); !day.After(last); day = day.Add(Day) {
		lo, hi := idAt(day), idAt(day.Add(Day))
		if slices.ContainsFunc(parts, func(p partition) bool { return p.overlaps(lo, hi) }) {
			continue
		}
		name := partitionName(t.name, day)
		created, moved, err := create(ctx, db, t, p, day)
		switch {
		case isBusy(err):
			tr.Busy = append(tr.Busy, "create "+name)
			p.Logger.WarnContext(ctx, "partition not created: a lock was busy; the next tick tries again",
				slog.String("partition", name), slog.String("error", err.Error()))
		case err != nil:
			return tr, fmt.Errorf("create partition %s: %w", name, err)
		case created:
			tr.Created, tr.Moved = append(tr.Created, name), tr.Moved+moved
			p.Logger.InfoContext(ctx, "partition created", slog.String("partition", name), slog.Int64("moved_from_default", moved))
		}
	}
	for _, part := range parts {
		if part.isDefault || part.to == nil || bitsTime(*part.to).After(horizon) {
			continue
		}
		kept, dropped, err := drop(ctx, db, t, p, part, horizon)
		switch {
		case isBusy(err):
			tr.Busy = append(tr.Busy, "drop "+part.name)
			p.Logger.WarnContext(ctx, "partition not dropped: a lock was busy; the next tick tries again",
				slog.String("partition", part.name), slog.String("error", err.Error()))
		case err != nil:
			return tr, fmt.Errorf("drop partition %s: %w", part.name, err)
		case kept != nil:
			tr.Kept = append(tr.Kept, *kept)
			if kept.Reason == KeptUnpublished {
				p.Logger.WarnContext(ctx, "outbox partition past the replay window keeps unpublished events: is the relay publishing?",
					slog.String("partition", part.name), slog.Int64("unpublished", kept.Rows))
			}
		case dropped:
			tr.Dropped = append(tr.Dropped, part.name)
			p.Logger.InfoContext(ctx, "partition dropped", slog.String("partition", part.name))
		}
	}
	for _, part := range parts {
		if !part.isDefault {
			continue
		}
		// Every attach scans the default under an exclusive lock: its size
		// is what a new partition costs the hot path.
		if err := db.QueryRow(ctx, `SELECT count(*) FROM ONLY `+ident(part.name)).Scan(&tr.DefaultRows); err != nil {
			return tr, fmt.Errorf("count rows of %s: %w", part.name, err)
		}
	}
	return tr, nil
}
