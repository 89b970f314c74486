package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// This file holds the invariant of object storage: the bytes of every
// asset of a SUCCEEDED task are in the store, as its row records them.

// checkObjects reads every asset of every SUCCEEDED task back from S3 and
// hashes it: what the row records is what the store holds.
func (w *world) checkObjects(ctx context.Context, r *report) error {
	rows, err := w.pool.Query(ctx, `SELECT t.task_id, t.missing_derivatives, a.kind, a.object_key, a.checksum_sha256, a.size_bytes,
			(SELECT s.audio_codec IS NOT NULL FROM assets s WHERE s.task_id = t.task_id AND s.kind = 'SOURCE')
		FROM generation_tasks t LEFT JOIN assets a USING (task_id) WHERE t.status = 'SUCCEEDED' ORDER BY t.task_id`)
	if err != nil {
		return err
	}
	type object struct {
		task    uuid.UUID
		missing []string
		kind    *string
		key     *string
		sum     []byte
		size    *int64
		audio   *bool
	}
	objects, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (object, error) {
		var o object
		err := row.Scan(&o.task, &o.missing, &o.kind, &o.key, &o.sum, &o.size, &o.audio)
		return o, err
	})
	if err != nil {
		return err
	}
	kinds := map[uuid.UUID][]string{}
	want := map[uuid.UUID][]string{}
	var problems []string
	read := 0
	for _, o := range objects {
		if _, ok := want[o.task]; !ok {
			k := []string{"PROXY", "SOURCE", "THUMBNAIL"}
			if o.audio != nil && *o.audio {
				k = append(k, "WAVEFORM")
			}
			want[o.task] = slices.DeleteFunc(k, func(s string) bool { return slices.Contains(o.missing, s) })
		}
		if o.kind == nil {
			continue
		}
		kinds[o.task] = append(kinds[o.task], *o.kind)
		body, _, err := w.blob.Open(ctx, *o.key)
		if err != nil {
			problems = append(problems, fmt.Sprintf("task %s %s %s: %v", o.task, *o.kind, *o.key, err))
			continue
		}
		h := sha256.New()
		n, err := io.Copy(h, body)
		_ = body.Close()
		read++
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("task %s %s: read: %v", o.task, *o.kind, err))
		case n != *o.size || hex.EncodeToString(h.Sum(nil)) != hex.EncodeToString(o.sum):
			problems = append(problems, fmt.Sprintf("task %s %s: the store holds %d bytes sha256 %x, the asset records %d bytes sha256 %x",
				o.task, *o.kind, n, h.Sum(nil), *o.size, o.sum))
		}
	}
	for task, k := range want {
		got := slices.Sorted(slices.Values(kinds[task]))
		slices.Sort(k)
		if !slices.Equal(got, k) {
			problems = append(problems, fmt.Sprintf("task %s SUCCEEDED with [%s], want [%s]", task, strings.Join(got, " "), strings.Join(k, " ")))
		}
	}
	r.add("each success has its objects, read back with their checksums", len(problems) == 0, "%d objects of %d successes read and hashed%s",
		read, len(want), firstOf(problems))
	return nil
}
