package providersim

import (
	"container/heap"
	"context"
	"time"
)

// schedule wakes at each job's completion and queues its webhook.
func (s *Server) schedule(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		var ready []delivery
		s.mu.Lock()
		for s.due.Len() > 0 && !s.due[0].at.After(now) {
			it := heap.Pop(&s.due).(dueItem)
			if j := s.jobs[it.id]; j != nil && !j.notified {
				if status, _ := j.state(now); terminal(status) {
					j.notified = true
					ready = append(ready, s.deliveryLocked(j, now))
				}
			}
		}
		wait := time.Hour
		if s.due.Len() > 0 {
			wait = s.due[0].at.Sub(now)
		}
		s.mu.Unlock()
		for _, d := range ready {
			s.enqueue(d)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.wake:
		}
	}
}

// dueItem is a job's completion time, for webhooks.
type dueItem struct {
	at time.Time
	id string
}

type dueHeap []dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
