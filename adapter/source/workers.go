package source

import (
	"context"
	"sync/atomic"
)

// workers are the delivery workers one receive loop may take: its own, and
// those the group's loops share.
type workers struct {
	own, shared chan struct{}
	busy        *atomic.Int64 // workers taken across the group
}

// worker is one taken worker; free gives it back.
type worker chan struct{}

func (w worker) free(p *workers) {
	<-w
	p.busy.Add(-1)
}

// take waits for one free worker, then takes every other free one too, up
// to n in all. It returns none once ctx ends.
func (p *workers) take(ctx context.Context, n int) []worker {
	var got []worker
	select {
	case p.own <- struct{}{}:
		got = append(got, p.own)
	case p.shared <- struct{}{}:
		got = append(got, p.shared)
	case <-ctx.Done():
		return nil
	}
	for len(got) < n {
		select {
		case p.own <- struct{}{}:
			got = append(got, p.own)
			continue
		default:
		}
		select {
		case p.shared <- struct{}{}:
			got = append(got, p.shared)
			continue
		default:
		}
		break
	}
	p.busy.Add(int64(len(got)))
	return got
}
