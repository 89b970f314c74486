package render

import "github.com/prometheus/client_golang/prometheus"

// DuplicateRuns is the counter of chunk deliveries that found their chunk
// claimed, for tests.
func DuplicateRuns() prometheus.Counter { return duplicateRuns }

// ChunkOutcome is the counter of one chunk outcome, for tests.
func ChunkOutcome(outcome string) prometheus.Counter { return chunkLabel(outcome) }
