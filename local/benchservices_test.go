package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// servicePIDFiles are where local/services/services.sh records the shared
// services' processes, relative to its directory. PostgreSQL keeps its own.
var servicePIDFiles = map[string][]string{
	"postgres": {"pg/postmaster.pid"},
	"rocketmq": {"proxy.pid", "namesrv.pid"},
	"redis":    {"redis.pid"},
	"s3":       {"s3.pid"},
}

// servicesAtRest is the services' CPU-s per second with no client, as
// BenchmarkJourney measured it before its runs; 0 when unknown.
var servicesAtRest float64

// restingServicesCPU measures the CPU the services use over d while
// nothing drives them, per second of wall time: what a run's services
// figure holds whatever the run does. 0 when the services are not known.
func restingServicesCPU(d time.Duration) float64 {
	from, ok := servicesCPU()
	if !ok {
		return 0
	}
	start := time.Now()
	time.Sleep(d)
	to, ok := servicesCPU()
	if !ok {
		return 0
	}
	var used time.Duration
	for name, c := range to {
		used += c - from[name]
	}
	return used.Seconds() / time.Since(start).Seconds()
}

// userHZ is the unit of /proc/<pid>/stat times: USER_HZ is 100 on every
// Linux architecture Go builds for.
const userHZ = 100

// servicesCPU reads the CPU the shared services have used so far, per
// service: the processes `make services-up` started, PostgreSQL with its
// backends. These are whole processes, so a run's difference includes any
// other client of the services at the same time. ok is false when the
// services were not started by services.sh on this machine.
func servicesCPU() (cpu map[string]time.Duration, ok bool) {
	dir := os.Getenv("AIVEDIO_SERVICES_DIR")
	if dir == "" {
		dir = "/tmp/aivedio-services"
	}
	cpu = map[string]time.Duration{}
	var postmaster int
	for name, files := range servicePIDFiles {
		for _, f := range files {
			pid, err := readPID(filepath.Join(dir, f))
			if err != nil {
				return nil, false
			}
			st, err := procStat(pid)
			if err != nil {
				return nil, false
			}
			// cutime: a PostgreSQL backend that exited was reaped by the
			// postmaster, and its CPU went there.
			cpu[name] += st.utime + st.stime + st.cutime + st.cstime
			if name == "postgres" {
				postmaster = pid
			}
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procStat(pid); err == nil && st.ppid == postmaster {
			cpu["postgres"] += st.utime + st.stime
		}
	}
	return cpu, true
}

func readPID(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // postmaster.pid has more lines; the pid is the first
	return strconv.Atoi(strings.TrimSpace(sc.Text()))
}

type stat struct {
	ppid                         int
	utime, stime, cutime, cstime time.Duration
}

// procStat reads /proc/<pid>/stat (proc(5)).
func procStat(pid int) (stat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')', with field 3 (state) first.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return stat{}, os.ErrInvalid
	}
	var st stat
	st.ppid, _ = strconv.Atoi(f[1])
	for i, d := range []*time.Duration{&st.utime, &st.stime, &st.cutime, &st.cstime} {
		ticks, _ := strconv.ParseInt(f[11+i], 10, 64)
		*d = time.Duration(ticks) * time.Second / userHZ
	}
	return st, nil
}
