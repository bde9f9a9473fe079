package pgserver

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary run TestServerDiesWithCaller's child.
const helperEnv = "PGSERVER_TEST_HELPER"

// TestServerDiesWithCaller kills a process that started a server without
// stopping it, and checks that postgres dies too.
func TestServerDiesWithCaller(t *testing.T) {
	if os.Getenv(helperEnv) == "1" {
		// The child: start, report, and wait to be killed.
		s, err := Start(t.Context(), Options{})
		if err != nil {
			fmt.Printf("error %v\n", strings.ReplaceAll(err.Error(), "\n", " | "))
			return
		}
		fmt.Printf("server %d %s\n", s.proc.cmd.Process.Pid, s.dir)
		time.Sleep(time.Minute) // bounded, should the parent fail to kill it
		return
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithCaller$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "server ") || strings.HasPrefix(l, "error ") {
				lines <- l
				return
			}
		}
		lines <- "error child ended without reporting: " + fmt.Sprint(sc.Err())
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(2 * readyTimeout):
		t.Fatal("child did not report its server")
	}
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		if strings.Contains(msg, ErrUnavailable.Error()) {
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	var pid int
	var dir string
	if _, err := fmt.Sscanf(line, "server %d %s", &pid, &dir); err != nil {
		t.Fatalf("parsing %q: %v", line, err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for range 300 {
		if !alive(pid) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("postgres (pid %d) still runs after the process that started it was killed", pid)
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	i := strings.LastIndexByte(string(stat), ')')
	return err != nil || i < 0 || i+2 >= len(stat) || (stat[i+2] != 'Z' && stat[i+2] != 'X')
}

// TestPortTaken checks that a postgres whose port is held by another
// process reports errPortTaken, on which Start tries another port.
func TestPortTaken(t *testing.T) {
	bins, err := findBinaries()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cred, err := serverCredential()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pgserver-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	s := &Server{dir: dir, data: dir + "/data", bins: bins, cred: cred}
	if err := s.initdb(t.Context(), bins, cred, nil); err != nil {
		t.Fatal(err)
	}

	// Hold a port, answering connections by closing them.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	err = s.launch(t.Context(), l.Addr().(*net.TCPAddr).Port)
	if err == nil {
		s.proc.stop()
		t.Fatal("launch on a taken port: got nil error")
	}
	if !errors.Is(err, errPortTaken) {
		t.Errorf("launch on a taken port: got %v, want errPortTaken", err)
	}
}
