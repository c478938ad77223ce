// SPDX-License-Identifier: Apache-2.0

package hurray_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	hurray "github.com/libhurray/libhurray/bindings/go"
)

// With the checking mode on, a Buffer not released shows up in CheckLive,
// labelled with the Go line that made it, and WriteCheckReport names it;
// once released it is gone. Runs in this process under HURRAY_CHECK=1 (the
// second run of bindings/run_tests.sh) and in a child with HURRAY_CHECK=1
// otherwise; with the mode off nothing is listed.
func TestCheckLiveListsLeakedBuffer(t *testing.T) {
	if !hurray.CheckEnabled() {
		before, err := hurray.CheckLive()
		if err != nil {
			t.Fatal(err)
		}
		b, err := hurray.Alloc(hurray.Float32, []int64{3}, false)
		if err != nil {
			t.Fatal(err)
		}
		after, err := hurray.CheckLive()
		b.Release()
		if err != nil || len(before) != 0 || len(after) != 0 {
			t.Fatalf("checking mode off: CheckLive %d, %d entries (%v), want none", len(before), len(after), err)
		}
		runChild(t, "TestChildCheckLive", "HURRAY_CHECK=1")
		return
	}
	checkLive(t)
}

func TestChildCheckLive(t *testing.T) {
	childOnly(t, "TestChildCheckLive")
	if !hurray.CheckEnabled() {
		t.Fatal("HURRAY_CHECK=1 did not turn the checking mode on")
	}
	checkLive(t)
}

func checkLive(t *testing.T) {
	leaked, err := hurray.Alloc(hurray.Float32, []int64{3}, false)
	_, file, line, _ := runtime.Caller(0)
	if err != nil {
		t.Fatal(err)
	}
	site := fmt.Sprintf("%s:%d hurray.Alloc", file, line-1)
	find := func(label string) []hurray.CheckEntry {
		t.Helper()
		live, err := hurray.CheckLive()
		if err != nil {
			t.Fatal(err)
		}
		var got []hurray.CheckEntry
		for _, e := range live {
			if e.Label == label {
				got = append(got, e)
			}
		}
		return got
	}
	mine := find(site)
	if len(mine) != 1 {
		t.Fatalf("CheckLive lists %d handles labelled %q, want 1", len(mine), site)
	}
	e := mine[0]
	if e.ID == 0 || e.MadeBy != "hurray_alloc" || e.DType != hurray.Float32 || e.NDim != 1 ||
		e.Device != (hurray.Device{Type: hurray.DeviceCPU}) || e.Data == 0 {
		t.Fatalf("entry %+v", e)
	}
	shares, err := leaked.Share(2)
	_, _, shareLine, _ := runtime.Caller(0)
	if err != nil {
		t.Fatal(err)
	}
	shareSite := fmt.Sprintf("%s:%d hurray.Buffer.Share", file, shareLine-1)
	// The source's handle is now one hurray_share made (the share consumes
	// and remakes it); it keeps its label.
	mine = find(site)
	if len(mine) != 1 || mine[0].MadeBy != "hurray_share" {
		t.Fatalf("after Share: %+v labelled %q, want 1 made by hurray_share", mine, site)
	}
	e = mine[0]
	if n := len(find(shareSite)); n != 2 {
		t.Fatalf("CheckLive lists %d shares labelled %q, want 2", n, shareSite)
	}
	for _, s := range shares {
		s.Release()
	}
	if n := len(find(shareSite)); n != 0 {
		t.Fatalf("released shares still listed (%d)", n)
	}

	var out bytes.Buffer
	n, err := hurray.WriteCheckReport(&out)
	if err != nil || n < 1 {
		t.Fatalf("WriteCheckReport: %d, %v", n, err)
	}
	report := out.String()
	want := fmt.Sprintf("handle %d: %s, made by hurray_share: float32, ndim 1", e.ID, site)
	if !strings.Contains(report, want) || !strings.HasPrefix(report, "hurray: ") {
		t.Fatalf("the report does not name the leaked Buffer (%q):\n%s", want, report)
	}
	if c := hurray.CheckReport(); c != n {
		t.Fatalf("CheckReport counted %d, WriteCheckReport %d", c, n)
	}

	leaked.Release()
	if n := len(find(site)); n != 0 {
		t.Fatal("a released Buffer is still listed")
	}
	out.Reset()
	if _, err := hurray.WriteCheckReport(&out); err != nil || strings.Contains(out.String(), site) {
		t.Fatalf("the report still names the released Buffer: %v\n%s", err, out.String())
	}
}

// With HURRAY_CHECK=stderr, CheckReport ends with libhurray's summary line,
// also when nothing is live (a Go program exits without running C atexit
// handlers, so without -race it is the only such line); with HURRAY_CHECK=1
// it prints nothing when nothing is live. Each in a child process.
func TestCheckReportSummaryLine(t *testing.T) {
	none := "hurray check: 0 handle(s) still live at exit, 0 double release(s) caught\n"
	one := "hurray check: 1 handle(s) still live at exit, 0 double release(s) caught\n"
	for _, c := range []struct {
		env  string
		want []string
	}{
		{"HURRAY_CHECK=stderr", []string{none + "report 0\n", "hurray: 1 handle(s) still live (checking mode leak report)", one + "report 1\n"}},
		{"HURRAY_CHECK=1", []string{"report 0\nhurray: 1 handle(s) still live (checking mode leak report)", "report 1\n"}},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildCheckReportSummary$", "-test.count=1")
		cmd.Env = append(append(os.Environ(), childEnv+"=TestChildCheckReportSummary"), c.env)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: child: %v\n%s", c.env, err, stderr.String())
		}
		got := stderr.String()
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.env, w, got)
			}
		}
		// A binary built with -race exits through the C library, whose exit
		// runs libhurray's own at-exit report: one more summary line, last.
		n := strings.Count(got, "hurray check: ")
		atExit := n == 3 && strings.HasSuffix(got, "report 1\n"+none)
		if c.env == "HURRAY_CHECK=1" && n != 0 {
			t.Errorf("%s: a summary line printed:\n%s", c.env, got)
		} else if c.env != "HURRAY_CHECK=1" && n != 2 && !atExit {
			t.Errorf("%s: %d summary lines, want 2 (one per CheckReport; 3 with the C at-exit one):\n%s",
				c.env, n, got)
		}
	}
}

func TestChildCheckReportSummary(t *testing.T) {
	childOnly(t, "TestChildCheckReportSummary")
	b, err := hurray.Alloc(hurray.Float32, []int64{3}, false)
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	fmt.Fprintf(os.Stderr, "report %d\n", hurray.CheckReport())
	leaked, err := hurray.Alloc(hurray.Float32, []int64{3}, false)
	if err != nil {
		t.Fatal(err)
	}
	n := hurray.CheckReport()
	fmt.Fprintf(os.Stderr, "report %d\n", n)
	leaked.Release()
}
