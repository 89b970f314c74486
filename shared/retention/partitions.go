package retention

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// Day is 24 hours: partitions are UTC days.
const Day = 24 * time.Hour

// DayStart is the first event id of the UTC day that holds t: the day's
// Unix milliseconds as the leading 48 bits, the rest zero. Every UUIDv7
// made during that day sorts at or above it and below the next day's.
func DayStart(t time.Time) uuid.UUID {
	return idAt(t.UTC().Truncate(Day))
}

// idAt is the smallest id whose leading 48 bits are t's Unix milliseconds.
func idAt(t time.Time) uuid.UUID {
	var id uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(id[:6], ms[2:])
	return id
}

// TimeOf is the creation time a UUIDv7 carries in its leading 48 bits; ok
// is false for an id of another version, whose leading bits are no time.
func TimeOf(id uuid.UUID) (t time.Time, ok bool) {
	if id.Version() != 7 {
		return time.Time{}, false
	}
	return bitsTime(id), true
}

// bitsTime reads an id's leading 48 bits as Unix milliseconds, whatever its
// version: how a range bound is read.
func bitsTime(id uuid.UUID) time.Time {
	var ms [8]byte
	copy(ms[2:], id[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(ms[:]))).UTC()
}

// partitionName is the name of the partition of table for day.
func partitionName(table string, day time.Time) string {
	return table + "_p" + day.UTC().Format("20060102")
}

// partition is one partition of a table and its bounds.
type partition struct {
	name      string
	isDefault bool
	// from and to bound the range; nil from is MINVALUE, nil to MAXVALUE.
	from, to *uuid.UUID
}

// overlaps reports whether the range [lo, hi) shares ids with p's.
func (p partition) overlaps(lo, hi uuid.UUID) bool {
	if p.isDefault {
		return false
	}
	return (p.to == nil || bytes.Compare(lo[:], p.to[:]) < 0) && (p.from == nil || bytes.Compare(p.from[:], hi[:]) < 0)
}

// boundRE reads pg_get_expr(relpartbound) of a RANGE partition on a uuid.
var boundRE = regexp.MustCompile(`^FOR VALUES FROM \((MINVALUE|'([0-9a-f-]{36})')\) TO \((MAXVALUE|'([0-9a-f-]{36})')\)$`)

// partitions lists the partitions of table in the connection's schema.
func partitions(ctx context.Context, q pg.Querier, table string) ([]partition, error) {
	rows, err := q.Query(ctx, `SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1) ORDER BY c.relname`, table)
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", table, err)
	}
	var out []partition
	var name, bound string
	_, err = pgx.ForEachRow(rows, []any{&name, &bound}, func() error {
		p, err := parseBound(name, bound)
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", table, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no partitions: is migration 000012 applied?", table)
	}
	return out, nil
}

func parseBound(name, bound string) (partition, error) {
	p := partition{name: name}
	if bound == "DEFAULT" {
		p.isDefault = true
		return p, nil
	}
	m := boundRE.FindStringSubmatch(bound)
	if m == nil {
		return p, fmt.Errorf("partition %s: bound %q is no range of event ids", name, bound)
	}
	for _, b := range []struct {
		text string
		dst  **uuid.UUID
	}{{m[2], &p.from}, {m[4], &p.to}} {
		if b.text == "" {
			continue // MINVALUE or MAXVALUE
		}
		id, err := uuid.Parse(b.text)
		if err != nil {
			return p, fmt.Errorf("partition %s: bound %q: %w", name, b.text, err)
		}
		*b.dst = &id
	}
	return p, nil
}
