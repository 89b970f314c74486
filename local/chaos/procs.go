package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// restartDelay is how long the supervisor waits before it starts a process
// that died again: about what a kubelet's first restart takes.
// A process that dies within crashLoop of its start is restarted after
// twice the last delay, up to maxRestartDelay.
const (
	restartDelay    = 500 * time.Millisecond
	crashLoop       = 5 * time.Second
	maxRestartDelay = 8 * time.Second
)

// proc is one binary the supervisor keeps running: started again whenever
// it exits, until the supervisor stops it.
type proc struct {
	name string
	kind string // api, relay, source, function, drain
	// stage is the stage a source delivers to, or a function runs.
	stage string
	bin   string
	args  []string
	env   []string
	logs  *os.File

	mu       sync.Mutex
	cmd      *exec.Cmd
	paused   bool
	stopping bool
	deaths   int // exits the supervisor did not ask for (kills included)
	done     chan struct{}
}

// start runs p and keeps it running until stop.
func (p *proc) start() error {
	p.done = make(chan struct{})
	if err := p.spawn(); err != nil {
		p.mu.Lock()
		p.stopping = true // nothing to supervise: stop returns at once
		p.mu.Unlock()
		close(p.done)
		return err
	}
	go p.supervise()
	return nil
}

// errStopping: the supervisor is stopping the process; it is not started.
var errStopping = errors.New("stopping")

// spawn starts the process unless it is being stopped; under the lock, so
// that stop either sees the new process or spawn sees stopping.
func (p *proc) spawn() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return errStopping
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	// Its own process group: a signal to the supervisor's terminal does
	// not reach it, only what the supervisor sends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd = cmd
	return nil
}

// supervise waits for the process and starts it again, as a kubelet does,
// backing off while it keeps dying at once (a crash loop).
func (p *proc) supervise() {
	defer close(p.done)
	delay := restartDelay
	for {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		began := time.Now()
		err := cmd.Wait()
		if time.Since(began) < crashLoop {
			delay = min(2*delay, maxRestartDelay)
		} else {
			delay = restartDelay
		}
		p.mu.Lock()
		stopping := p.stopping
		if !stopping {
			p.deaths++
		}
		p.paused = false
		p.mu.Unlock()
		if stopping {
			return
		}
		fmt.Fprintf(p.logs, "=== chaos: %s exited (%v); starting it again in %s\n", p.name, err, delay)
		time.Sleep(delay)
		for {
			err := p.spawn()
			if errors.Is(err, errStopping) {
				return
			}
			if err == nil {
				break
			}
			time.Sleep(time.Second)
		}
	}
}

// signal sends sig to the running process and its children (its process
// group: an ffmpeg a killed or paused function runs dies or stops with
// it); it reports whether one ran.
func (p *proc) signal(sig syscall.Signal) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil || p.stopping {
		return false
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig) == nil
}

// kill is SIGKILL: no cleanup, no ACK, no commit of what was in flight.
func (p *proc) kill() bool {
	p.mu.Lock()
	paused := p.paused
	p.mu.Unlock()
	if paused {
		return false // the pause ends it; two faults on one process at once teach nothing
	}
	return p.signal(syscall.SIGKILL)
}

// pause stops the process for d (SIGSTOP, then SIGCONT): to the rest of
// the system it hangs, holding whatever it received.
func (p *proc) pause(ctx context.Context, d time.Duration) bool {
	p.mu.Lock()
	if p.paused {
		p.mu.Unlock()
		return false
	}
	p.paused = true
	p.mu.Unlock()
	if !p.signal(syscall.SIGSTOP) {
		p.mu.Lock()
		p.paused = false
		p.mu.Unlock()
		return false
	}
	go func() {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		p.signal(syscall.SIGCONT)
		p.mu.Lock()
		p.paused = false
		p.mu.Unlock()
	}()
	return true
}

// stop ends the process for good: SIGTERM (SIGCONT first, in case it is
// paused), then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		if cmd != nil && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		<-p.done
	}
}

func (p *proc) deathCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deaths
}

// pid is the running process's id; 0 before the first start.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
