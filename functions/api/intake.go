package api

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/shared/tenant"
)

// CodeRateLimited: the tenant starts new work faster than its priority
// class allows (API_TENANT_RATE, API_TENANT_BURST).
const CodeRateLimited = "rate_limited"

// intakeSlowdown divides the intake rate of a tenant below
// API_SHED_BELOW_PRIORITY while the outbox backlog is past half the shed
// threshold: low-priority work slows down first (seed 7.14.2), well
// before its creates are refused outright.
const intakeSlowdown = 4

// intakeClass is one priority class's intake limit: tenants of priority
// from up to the next class's start at most rate per second, burst at
// once.
type intakeClass struct {
	from  int
	rate  float64
	burst int
}

// intake limits how fast one tenant starts new work (generations, renders,
// uploads), with a token bucket per tenant in Redis, so that every API
// replica counts against the same bucket: redis_rate's GCRA, whose state
// is one key per tenant. When Redis cannot answer, new work is let in (and
// logged): the limit protects the pipeline from a flood, and refusing
// every tenant because Redis blinked would be the larger harm.
type intake struct {
	limiter *redis_rate.Limiter
	classes []intakeClass // by from, ascending; empty: no limit
	shed    *shedder
	log     *slog.Logger
	metrics *metrics
}

func newIntake(rdb redis.UniversalClient, rates map[int]float64, bursts map[int]int, shed *shedder, log *slog.Logger, m *metrics) *intake {
	in := &intake{limiter: redis_rate.NewLimiter(rdb), shed: shed, log: log, metrics: m}
	for from, rate := range rates {
		in.classes = append(in.classes, intakeClass{from: from, rate: rate, burst: max(bursts[from], 1)})
	}
	slices.SortFunc(in.classes, func(a, b intakeClass) int { return a.from - b.from })
	return in
}

// class is the class of a tenant of priority: the highest class starting
// at or below it, or the lowest class for a priority below every class.
func (in *intake) class(priority int) intakeClass {
	c := in.classes[0]
	for _, k := range in.classes[1:] {
		if k.from <= priority {
			c = k
		}
	}
	return c
}

// limit is p's limit now: its class's, slowed down under backlog pressure
// when p's priority is low. The rate is per minute so that a fraction per
// second (0.5: one every two seconds) keeps its meaning.
func (in *intake) limit(p tenant.Principal) (redis_rate.Limit, intakeClass) {
	c := in.class(p.Priority)
	rate := c.rate
	if in.shed.pressed(p) {
		rate /= intakeSlowdown
	}
	return redis_rate.Limit{Rate: max(int(math.Round(rate*60)), 1), Period: time.Minute, Burst: c.burst}, c
}

// limited serves h only while p's tenant is within its intake limit, and
// says where it stands in the IETF RateLimit-Policy and RateLimit headers
// on every answer (draft-ietf-httpapi-ratelimit-headers): q is the burst,
// w the seconds the bucket takes to refill from empty, r what is left, t
// the seconds until the bucket is full again.
func (s *Server) limited(h principalHandler) principalHandler {
	in := s.intake
	return func(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
		if len(in.classes) == 0 {
			return h(w, r, p)
		}
		l, c := in.limit(p)
		ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
		res, err := in.limiter.Allow(ctx, "tenant:"+p.TenantID.String(), l)
		cancel()
		if err != nil {
			in.metrics.intakeUnchecked()
			in.log.WarnContext(r.Context(), "intake limit not checked: Redis did not answer; the request goes through",
				slog.String("tenant_id", p.TenantID.String()), slog.String("error", err.Error()))
			return h(w, r, p)
		}
		window := int(math.Ceil(float64(l.Burst) * l.Period.Seconds() / float64(l.Rate)))
		w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"tenant";q=%d;w=%d`, l.Burst, window))
		w.Header().Set("RateLimit", fmt.Sprintf(`"tenant";r=%d;t=%d`, res.Remaining, ceilSeconds(res.ResetAfter)))
		if res.Allowed > 0 {
			return h(w, r, p)
		}
		in.metrics.intakeRefused(c.from)
		retry := max(ceilSeconds(res.RetryAfter), 1)
		perSecond := float64(l.Rate) / l.Period.Seconds()
		e := errorf(http.StatusTooManyRequests, CodeRateLimited,
			"this tenant (priority %d) may start %s new generations, renders or uploads per second, %d at once; it is over that limit now: retry after %d seconds",
			p.Priority, strconv.FormatFloat(perSecond, 'g', 3, 64), l.Burst, retry)
		if perSecond < c.rate {
			e.Message += " (the pipeline is behind, and lower-priority tenants are slowed down first)"
		}
		e.Header = http.Header{"Retry-After": {strconv.Itoa(retry)}}
		return e
	}
}

func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(math.Ceil(d.Seconds()))
}
