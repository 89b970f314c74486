package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/local/drive"
)

// The timeline every chaos render asks for: two of its tenant's generated
// clips (the simulator's are 2 s, 320×180 at 24 fps with an AAC tone)
// whole, the second dissolving in over renderDissolve, and one title:
// 3.5 s of output. Its content (and so its render key) is the clip pair
// and the profile.
const (
	renderClipSeconds = 2.0
	renderDissolve    = 0.5
	renderTitle       = "AiVedio chaos"
)

// clipWait bounds how long a render waits for a tenant with two
// generated clips.
const clipWait = 5 * time.Minute

// defaultRenders is how many renders a run of n generations asks for
// when -renders is not given: one per 25 generations, at least three, so
// that the short run has a repeat too.
func defaultRenders(n int) int { return max(3, n/25) }

// repeatOf is the earlier render whose content render i asks for again
// (-1: none): the third of every six, so that a run sees an output reused
// (or, when the first is still rendering, two renders sharing chunks).
func repeatOf(i int) int {
	if i%6 == 2 {
		return i - 2
	}
	return -1
}

// chooseTenant is the tenant render i is asked for: the first, from its
// turn in the round robin on, with at least two generated clips (ok false:
// none has yet).
func chooseTenant(turn int, clips [][]string) (int, bool) {
	for k := range clips {
		t := (turn + k) % len(clips)
		if len(clips[t]) >= 2 {
			return t, true
		}
	}
	return 0, false
}

// pickClips chooses the two clips of a new render from a tenant's
// generated clips (oldest first): the newest pair not rendered before, so
// that each render is content of its own while clips last; once every
// pair was used, the newest pair again. ok false: fewer than two clips.
func pickClips(clips []string, used map[[2]string]bool) (pair [2]string, ok bool) {
	if len(clips) < 2 {
		return pair, false
	}
	for b := len(clips) - 1; b >= 1; b-- {
		for a := b - 1; a >= 0; a-- {
			if p := [2]string{clips[a], clips[b]}; !used[p] {
				return p, true
			}
		}
	}
	return [2]string{clips[len(clips)-2], clips[len(clips)-1]}, true
}

// nextDue is when the render after one due at due and requested at asked
// is due: a gap after due, or half a gap after asked when waiting for
// clips made it late, so that renders asked late are still spread out
// instead of all asked at once.
func nextDue(due, asked time.Time, gap time.Duration) time.Time {
	return maxTime(due.Add(gap), asked.Add(gap/2))
}

// renderAsk is what one render requested: under which tenant, of which
// revision, in which profile.
type renderAsk struct {
	tenant   int
	revision string
	profile  string
}

// startRenders requests the run's renders spread over the same part of
// the fault window as the generations, render i at (i + ½) gaps (see
// nextDue), each once a tenant has two generated clips: a project, a revision of two of
// its clips, and the render under an idempotency key of its own, in a
// profile cycling over drive.RenderProfiles (a repeat keeps its
// original's). Every call is sent again until accepted. The channel
// yields nil once every render is accepted.
func (w *world) startRenders(ctx context.Context) <-chan error {
	out := make(chan error, 1)
	n := w.o.Renders
	gap := w.o.Faults * 4 / 5 / time.Duration(max(n, 1))
	due := time.Now().Add(gap / 2)
	go func() {
		client := &http.Client{Timeout: 10 * time.Second}
		used := make([]map[[2]string]bool, len(w.keys))
		for t := range used {
			used[t] = map[[2]string]bool{}
		}
		asks := make([]renderAsk, 0, n)
		for i := range n {
			select {
			case <-ctx.Done():
				out <- ctx.Err()
				return
			case <-time.After(time.Until(due)):
			}
			var ask renderAsk
			if j := repeatOf(i); j >= 0 {
				ask = asks[j]
			} else {
				t, clips, err := w.waitClips(ctx, i)
				if err != nil {
					out <- fmt.Errorf("render %d: %w", i, err)
					return
				}
				pair, _ := pickClips(clips, used[t])
				used[t][pair] = true
				rev, err := w.createRevision(ctx, client, t, i, pair)
				if err != nil {
					out <- fmt.Errorf("render %d: %w", i, err)
					return
				}
				ask = renderAsk{tenant: t, revision: rev, profile: drive.RenderProfiles[i%len(drive.RenderProfiles)]}
			}
			asks = append(asks, ask)
			key := fmt.Sprintf("chaos-%d-render-%d", w.o.Seed, i)
			body, _ := json.Marshal(map[string]any{"project_revision_id": ask.revision, "profile": ask.profile})
			id, err := sendUntilAccepted(ctx, client, w.apiURL, w.keys[ask.tenant], apiCall{path: "/v1/renders", key: key, body: body, id: "render_id"})
			if err != nil {
				out <- fmt.Errorf("render %d: %w", i, err)
				return
			}
			w.mu.Lock()
			w.renders[key] = id
			w.mu.Unlock()
			due = nextDue(due, time.Now(), gap)
		}
		out <- nil
	}()
	return out
}

// waitClips waits until a tenant has two generated clips (the SOURCE
// assets of its SUCCEEDED generations) and returns it, from render i's
// turn in the round robin on, with its clips oldest first.
func (w *world) waitClips(ctx context.Context, i int) (int, []string, error) {
	deadline := time.Now().Add(clipWait)
	for {
		// PostgreSQL may be restarting: a failed look is tried again.
		if clips, err := w.generatedClips(ctx); err == nil {
			if t, ok := chooseTenant(i%len(w.tenants), clips); ok {
				return t, clips[t], nil
			}
		}
		if time.Now().After(deadline) {
			return 0, nil, fmt.Errorf("no tenant had two SUCCEEDED generations within %s", clipWait)
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// generatedClips are each tenant's generated clips, oldest first, indexed
// like w.tenants.
func (w *world) generatedClips(ctx context.Context) ([][]string, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := w.pool.Query(qctx, `SELECT t.tenant_id::text, a.asset_id::text FROM generation_tasks t
		JOIN assets a ON a.task_id = t.task_id AND a.kind = 'SOURCE' AND a.status = 'READY'
		WHERE t.status = 'SUCCEEDED' ORDER BY a.created_at, a.asset_id`)
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	for t, id := range w.tenants {
		index[id] = t
	}
	clips := make([][]string, len(w.tenants))
	var tenant, asset string
	_, err = pgx.ForEachRow(rows, []any{&tenant, &asset}, func() error {
		if t, ok := index[tenant]; ok {
			clips[t] = append(clips[t], asset)
		}
		return nil
	})
	return clips, err
}

// createRevision makes a project of tenant t for render i and the
// revision of pair in it, and returns the revision's id. A project create
// has no idempotency key: one sent again after an answer was lost may
// leave an extra, empty project behind, which is harmless. The revision's
// content names it, so one sent again is the same revision (200).
func (w *world) createRevision(ctx context.Context, client *http.Client, t, i int, pair [2]string) (string, error) {
	body, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("chaos render %d", i)})
	project, err := sendUntilAccepted(ctx, client, w.apiURL, w.keys[t], apiCall{path: "/v1/projects", body: body, id: "project_id"})
	if err != nil {
		return "", err
	}
	timeline := map[string]any{
		"clips": []map[string]any{
			{"asset_id": pair[0], "in": 0, "out": renderClipSeconds},
			{"asset_id": pair[1], "in": 0, "out": renderClipSeconds,
				"transition_in": map[string]any{"type": "dissolve", "duration": renderDissolve}},
		},
		"titles": []map[string]any{{"text": renderTitle, "start": 0.5, "end": 2.5}},
	}
	body, _ = json.Marshal(map[string]any{"timeline": timeline})
	return sendUntilAccepted(ctx, client, w.apiURL, w.keys[t], apiCall{path: "/v1/projects/" + project + "/revisions", body: body, id: "revision_id"})
}

// renderIDs are the renders the run requested.
func (w *world) renderIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.renders))
	for _, id := range w.renders {
		out = append(out, id)
	}
	return out
}
