package source

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
)

// receiveLoop asks c for as many messages as there are free workers, up to
// its share of them, and hands each to a worker. The share keeps a loop
// long-polling an idle topic from holding every free worker while another
// topic of the group has messages waiting. Receives run on receiving, which
// a stop does not end (see the package doc); what one brings after the
// stop is given back.
func (s *Source) receiveLoop(ctx, receiving, work context.Context, c mq.Consumer, pool *workers, inFlight *sync.WaitGroup) {
	share := max(1, s.p.Workers/len(s.p.Consumers))
	for ctx.Err() == nil {
		taken := pool.take(ctx, share)
		if len(taken) == 0 {
			return
		}
		batch, err := c.Receive(receiving, len(taken), s.p.Invisible)
		observeLateness(s.late, batch, time.Now())
		s.hold(batch...)
		for _, w := range taken[len(batch):] {
			w.free(pool)
		}
		taken = taken[:len(batch)]
		if ctx.Err() != nil || err != nil {
			for i, msg := range batch { // none on error from today's consumers, but never leak one
				s.giveBack(c, msg)
				s.release(msg)
				taken[i].free(pool)
			}
			if ctx.Err() != nil {
				return
			}
			s.p.Logger.WarnContext(ctx, "receive failed", slog.String("consumer_group", s.p.Group.Name), slog.String("error", err.Error()))
			s.pause(ctx, time.Second)
			continue
		}
		for _, chain := range chains(batch, taken) {
			inFlight.Add(1)
			go func() {
				defer inFlight.Done()
				s.handleChain(work, c, chain, pool)
			}()
		}
	}
}

// leased is a received message and the worker that handles it.
type leased struct {
	msg    *mq.Received
	worker worker
}

// chains splits a batch into the runs that must be handled one after
// another: the messages of one FIFO message group, in the order received
// (a FIFO receive may hand over several of one group at once). A message
// without a group is a chain of its own, so it runs in parallel with
// everything else.
func chains(batch []*mq.Received, taken []worker) [][]leased {
	var out [][]leased
	byGroup := map[string]int{}
	for n, msg := range batch {
		l := leased{msg, taken[n]}
		if msg.MessageGroup == "" {
			out = append(out, []leased{l})
			continue
		}
		i, ok := byGroup[msg.MessageGroup]
		if !ok {
			i = len(out)
			byGroup[msg.MessageGroup] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], l)
	}
	return out
}

// handleChain handles a chain in order, freeing a worker slot per message.
// When a message is not settled for good (it will be retried, or work
// stopped), the rest of its chain must not overtake it: they go back to the
// broker unhandled, to follow it.
func (s *Source) handleChain(ctx context.Context, c mq.Consumer, chain []leased, pool *workers) {
	for i, l := range chain {
		v := s.handle(ctx, c, l.msg)
		s.release(l.msg)
		l.worker.free(pool)
		if v.action == actAck || v.action == actQuarantine {
			continue
		}
		for _, rest := range chain[i+1:] {
			s.handBack(ctx, c, l.msg, rest.msg)
			s.release(rest.msg)
			rest.worker.free(pool)
		}
		return
	}
}

// hold counts received messages as buffered in the adapter until
// [Source.release]: the client-side buffer of seed 7.13.5.
func (s *Source) hold(msgs ...*mq.Received) {
	if len(msgs) == 0 {
		return
	}
	g := s.series.group()
	for _, msg := range msgs {
		g.buffered.Inc()
		g.bufferedBytes.Add(float64(len(msg.Body)))
	}
}

// release counts a message settled, handed back or given back.
func (s *Source) release(msg *mq.Received) {
	g := s.series.group()
	g.buffered.Dec()
	g.bufferedBytes.Sub(float64(len(msg.Body)))
}

// handBack returns a message unhandled because the one before it in its
// message group was not settled; it becomes visible with that one's retry.
func (s *Source) handBack(ctx context.Context, c mq.Consumer, head, msg *mq.Received) {
	s.series.count(resultHandedBack).Inc()
	if ctx.Err() != nil {
		return // stopping: the invisible time runs out on its own
	}
	if err := s.finish(ctx, c, msg, retryIn(s.p.RetryDelay(head.DeliveryAttempt))); err != nil {
		s.log.WarnContext(ctx, "hand back failed; the message returns when its invisible time ends",
			slog.String("message_id", msg.MessageID), slog.String("error", err.Error()))
	}
}

// giveBackAfter is when a message received as the source stopped becomes
// visible again, for another consumer of the group to take.
const giveBackAfter = time.Second

// giveBack returns a message received after the stop, unhandled.
func (s *Source) giveBack(c mq.Consumer, msg *mq.Received) {
	s.series.count(resultHandedBack).Inc()
	ctx := context.Background()
	if err := s.finish(ctx, c, msg, retryIn(giveBackAfter)); err != nil {
		s.log.WarnContext(ctx, "give back at stop failed; the message returns when its invisible time ends",
			slog.String("message_id", msg.MessageID), slog.String("error", err.Error()))
	}
}
