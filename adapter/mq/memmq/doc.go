// Package memmq is an in-process RocketMQ 5 emulator implementing the broker
// interface of package mq, for `go run ./local` and fast unit tests. It
// passes the same conformance suite (package mq/mqtest) as the real RocketMQ
// client, and where the two were seen to differ it follows what a RocketMQ
// 5.3.3 proxy does.
//
// # Guarantees
//
// Delivery is at least once, per consumer group: every group sees every
// message of the topics it subscribes to whose tag its filter accepts. A
// received message stays invisible to its group for the invisible duration;
// unless acknowledged before then it is delivered again with DeliveryAttempt
// one higher and the same MessageID. A broker made with [New] holds its
// messages in memory only: they are gone when the process ends. One made
// with [Open] keeps them, and every group's state of them, in a journal
// file written before each call returns: opened again after the process
// died, it goes on where it was, and a message a consumer was handling
// then is delivered again at once.
//
// # RocketMQ behaviour it mirrors
//
//   - Topics and groups must exist before use ([Broker.CreateTopic],
//     [Broker.CreateGroup], [Broker.Apply]); sending to or subscribing to an
//     unknown topic fails. A message whose kind does not match its topic's type
//     is refused: DELAY topics need DeliveryTime, FIFO topics need
//     MessageGroup, NORMAL topics take neither. Empty bodies are refused.
//   - Receive refuses an invisible duration below the minimum (10 s by
//     default, like the proxy); ChangeInvisibleDuration takes any duration.
//   - A delayed message is delivered at or after its DeliveryTime.
//   - The dead-letter move is lazy, as in the proxy: when a message that has
//     been delivered MaxDeliveryAttempts times becomes visible again, the next
//     Receive of its group moves it to the topic "%DLQ%<group>" (created on
//     first use, type NORMAL) instead of delivering it. The dead-letter copy
//     keeps MessageID, tag, keys, properties, body and message group, and
//     carries its attempt count: a group reading the dead-letter topic sees
//     DeliveryAttempt continue from there and moves the copy to its own
//     dead-letter topic if its own MaxDeliveryAttempts is not larger.
//   - FIFO topics are split into queues by a hash of the message group. For an
//     orderly group a queue is blocked while any of its messages is in flight,
//     so one unacknowledged message holds back the later messages of its own
//     message group and of every other message group that hashes to the same
//     queue; other queues keep flowing. One Receive may return several
//     consecutive messages of a queue, in order.
//   - A group that first subscribes to a topic starts at the oldest retained
//     message, like a new group on a fresh RocketMQ topic; the dead-letter
//     drainer relies on this.
//
// # Where it differs
//
// Ack and ChangeInvisibleDuration with a handle whose delivery has expired,
// been acknowledged, or been replaced by a later ChangeInvisibleDuration fail
// with [ErrInvalidHandle]. The proxy does the same for ChangeInvisibleDuration
// on an expired handle ("receipt handle is expired"), but it answers such an
// Ack with success and ignores it; on both the message is delivered again, so
// an Ack that comes after the invisible duration never settles a message.
//
// Long polls wait in real time even when Opts.NowFunc is a fake clock; a
// Receive always looks at the clock once before it waits.
package memmq
