package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/telemetry"
	"github.com/aivedio/pipeline/shared/tenant"
)

// requestInfo is what the handlers tell the request log.
type requestInfo struct {
	id       string
	tenantID uuid.UUID
}

type requestInfoKey struct{}

func infoOf(ctx context.Context) *requestInfo {
	if ri, ok := ctx.Value(requestInfoKey{}).(*requestInfo); ok {
		return ri
	}
	return &requestInfo{}
}

func requestID(ctx context.Context) string { return infoOf(ctx).id }

// recorder remembers the status a handler wrote. Unwrap lets
// http.ResponseController reach the connection (Flush, write deadlines).
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// observe gives every request an id, returns its trace (the traceparent
// answer header), logs it, counts it, and turns a panic into a 500 without
// a stack trace in the response.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &requestInfo{id: newRequestID()}
		ctx := context.WithValue(r.Context(), requestInfoKey{}, ri)
		outer := r
		r = r.WithContext(ctx)
		rec := &recorder{ResponseWriter: w}
		rec.Header().Set("X-Request-Id", ri.id)
		// The trace the request is part of, generated when the caller sent
		// none: every event the request writes carries it.
		traceParent, _ := telemetry.TraceParent(ctx)
		if traceParent != "" {
			rec.Header().Set("Traceparent", traceParent)
		}
		defer func() {
			outer.Pattern = r.Pattern // for the server span's name
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(ctx, "handler panicked", slog.String("request_id", ri.id),
					slog.String("error", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
				if rec.status == 0 {
					writeError(rec, errInternal)
				}
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			// r.Pattern, not the path: the route, with no ids or provider
			// names spelled out, keeps logs and metric labels small.
			route := r.Pattern
			if route == "" || route == "/" {
				route = "unmatched"
			}
			d := time.Since(start)
			s.metrics.observe(route, status, d)
			attrs := []slog.Attr{
				slog.String("request_id", ri.id), slog.String("route", route),
				slog.Int("status", status), slog.Duration("duration", d),
			}
			if ri.tenantID != uuid.Nil {
				attrs = append(attrs, slog.String("tenant_id", ri.tenantID.String()))
			}
			if traceParent != "" {
				attrs = append(attrs, slog.String("trace_id", traceParent[3:35]))
			}
			level := slog.LevelInfo
			if status >= 500 {
				level = slog.LevelError
			}
			s.log.LogAttrs(ctx, level, "request", attrs...)
		}()
		next.ServeHTTP(rec, r)
	})
}

func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// publicRoute serves a handler that needs no API key.
func (s *Server) publicRoute(h func(http.ResponseWriter, *http.Request) *apiError) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := h(w, r); e != nil {
			writeError(w, e)
		}
	})
}

// principalHandler serves a request made with a valid API key.
type principalHandler func(http.ResponseWriter, *http.Request, tenant.Principal) *apiError

// tenantRoute serves h for any valid key, acting as the key's tenant.
func (s *Server) tenantRoute(h principalHandler) http.Handler {
	return s.authenticated(h, "")
}

// adminRoute serves h only for admin keys.
func (s *Server) adminRoute(h principalHandler) http.Handler {
	return s.authenticated(h, tenant.RoleAdmin)
}

func (s *Server) authenticated(h principalHandler, role string) http.Handler {
	return s.publicRoute(func(w http.ResponseWriter, r *http.Request) *apiError {
		p, e := s.authenticate(r)
		if e != nil {
			return e
		}
		infoOf(r.Context()).tenantID = p.TenantID
		if role != "" && p.Role != role {
			return errorf(http.StatusForbidden, CodeForbidden, "this endpoint needs an API key of role %s; this key has role %s", role, p.Role)
		}
		return h(w, r, p)
	})
}

func (s *Server) authenticate(r *http.Request) (tenant.Principal, *apiError) {
	unauthenticated := func(msg string) *apiError {
		e := errorf(http.StatusUnauthorized, CodeUnauthenticated, "%s", msg)
		e.Header = http.Header{"WWW-Authenticate": {`Bearer realm="aivedio"`}}
		return e
	}
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return tenant.Principal{}, unauthenticated("missing API key: send the header Authorization: Bearer <api key>")
	}
	scheme, key, ok := strings.Cut(values[0], " ")
	if len(values) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return tenant.Principal{}, unauthenticated("malformed Authorization header: send exactly one, as Authorization: Bearer <api key>")
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	p, err := tenant.Authenticate(ctx, s.pool, strings.TrimSpace(key))
	if errors.Is(err, tenant.ErrUnauthorized) {
		return tenant.Principal{}, unauthenticated("unknown or revoked API key, or the tenant is not active")
	}
	if err != nil {
		return tenant.Principal{}, s.internal(r.Context(), "authenticate API key", err)
	}
	return p, nil
}

func joinOr(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

func joinComma(items []string) string { return strings.Join(items, ", ") }
