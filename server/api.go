package server

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/process"
)

// APIPrefix is where the JSON API lives.
const APIPrefix = "/api/v1"

// EventSeqHeader, on GET /processes, is the last event seq the listing
// includes: a console that streams events after it misses nothing.
const EventSeqHeader = "Libos-Event-Seq"

// route is one API endpoint: the OpenAPI document must describe exactly these.
type route struct {
	method, path string
	handle       func(s *Server, w http.ResponseWriter, r *http.Request)
}

// routes of the API, relative to APIPrefix.
var apiRoutes = []route{
	{"GET", "/processes", (*Server).listProcesses},
	{"POST", "/processes", (*Server).spawn},
	{"GET", "/processes/{pid}", (*Server).inspect},
	{"GET", "/processes/{pid}/context", (*Server).context},
	{"GET", "/processes/{pid}/messages", (*Server).messages},
	{"POST", "/processes/{pid}/messages", (*Server).postMessage},
	{"POST", "/processes/{pid}/signal", (*Server).signal},
	{"GET", "/processes/{pid}/goal", (*Server).goal},
	{"PUT", "/processes/{pid}/goal", (*Server).setGoal},
	{"GET", "/processes/{pid}/objects", (*Server).objectsOf},
	{"POST", "/processes/{pid}/checkpoints", (*Server).createCheckpoint},
	{"GET", "/objects/{oid}", (*Server).object},
	{"GET", "/approvals", (*Server).approvals},
	{"POST", "/approvals/{pid}/{call_id}", (*Server).decide},
	{"GET", "/checkpoints", (*Server).checkpoints},
	{"GET", "/checkpoints/{id}", (*Server).inspectCheckpoint},
	{"POST", "/checkpoints/{id}/restore", (*Server).restore},
	{"POST", "/checkpoints/{id}/fork", (*Server).fork},
	{"GET", "/events", (*Server).events},
	{"GET", "/openapi.json", (*Server).openAPI},
}

func (s *Server) apiMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range apiRoutes {
		h := rt.handle
		mux.HandleFunc(rt.method+" "+APIPrefix+rt.path, func(w http.ResponseWriter, r *http.Request) { h(s, w, r) })
	}
	mux.HandleFunc(APIPrefix+"/", s.unrouted)
	return mux
}

// unrouted answers a path no route has (404), or a method the path's
// routes do not take (405 with Allow).
func (s *Server) unrouted(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.api.Handler(probe); pattern != "" && pattern != APIPrefix+"/" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		writeError(w, errNotFound("%s %s: no such endpoint (see %s/openapi.json)", r.Method, r.URL.Path, APIPrefix))
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
		Message: fmt.Sprintf("%s %s: the method must be %s", r.Method, r.URL.Path, strings.Join(allow, " or "))})
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIDoc)
}

// pathPID parses the {pid} of r's path.
func pathPID(r *http.Request) (int64, *apiError) {
	v := r.PathValue("pid")
	pid, err := strconv.ParseInt(v, 10, 64)
	if err != nil || pid <= 0 {
		return 0, errInvalid("pid %q: must be a positive integer", v)
	}
	return pid, nil
}

// existing parses {pid} and checks the process exists.
func (s *Server) existing(r *http.Request) (kernel.ProcessInfo, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return kernel.ProcessInfo{}, e
	}
	info, err := s.rt.Process(pid)
	if err != nil {
		return kernel.ProcessInfo{}, kernelError(err)
	}
	return info, nil
}

// answer writes v, or err as its error answer.
func answer(w http.ResponseWriter, status int, v any, err error) {
	if err != nil {
		writeError(w, kernelError(err))
		return
	}
	writeJSON(w, status, v)
}

// ProcessRow is one process as GET /processes lists it: the row of
// `libos ps --json`.
type ProcessRow struct {
	PID       int64   `json:"pid"`
	ParentPID *int64  `json:"parent_pid"`
	Image     string  `json:"image"`
	Status    string  `json:"status"`
	WaitingOn *string `json:"waiting_on"`
	// NextAttempt is when a provider backoff asks again.
	NextAttempt *time.Time `json:"next_attempt_at,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	ResultOID   string     `json:"result_oid,omitempty"`
	Turn        int        `json:"turn"`
	CreatedAt   time.Time  `json:"created_at"`
	AgeSeconds  int64      `json:"age_seconds"`
}

// Row is p as ps --json shows it at now.
func Row(p kernel.ProcessInfo, now time.Time) ProcessRow {
	r := ProcessRow{PID: p.PID, Image: p.Image, Status: string(p.Status), Reason: p.Reason, ResultOID: p.ResultOID, Turn: p.Turn,
		CreatedAt: p.CreatedAt.UTC(), AgeSeconds: int64(now.Sub(p.CreatedAt).Seconds())}
	if p.ParentPID != 0 {
		pp := p.ParentPID
		r.ParentPID = &pp
	}
	if w := WaitingOn(p); w != "" {
		r.WaitingOn = &w
	}
	if p.Wait != nil && p.Wait.Kind == process.WaitProvider && !p.Wait.Until.IsZero() {
		at := p.Wait.Until.UTC()
		r.NextAttempt = &at
	}
	return r
}

// WaitingOn says what a waiting process waits on, as ps shows it.
func WaitingOn(p kernel.ProcessInfo) string {
	if p.Wait == nil {
		return ""
	}
	switch p.Wait.Kind {
	case "child":
		return fmt.Sprintf("child %d", p.Wait.ChildPID)
	case "timer":
		return "timer until " + p.Wait.Until.UTC().Format(time.RFC3339)
	}
	return string(p.Wait.Kind)
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) {
	ps, seq, err := s.processes()
	if err != nil {
		writeError(w, kernelError(err))
		return
	}
	now := s.opts.Now()
	rows := make([]ProcessRow, len(ps))
	for i, p := range ps {
		rows[i] = Row(p, now)
	}
	// Every event up to seq shows in the listing (later ones may too).
	w.Header().Set(EventSeqHeader, strconv.FormatUint(seq, 10))
	writeJSON(w, http.StatusOK, rows)
}

// SpawnRequest is the body of POST /processes.
type SpawnRequest struct {
	Image string `json:"image"`
	Goal  string `json:"goal"`
	// Grants, Asks and Denies are RESOURCE=RIGHTS[@USES][~DURATION] specs,
	// as run's --grant, --ask and --deny take them.
	Grants []string `json:"grants,omitempty"`
	Asks   []string `json:"asks,omitempty"`
	Denies []string `json:"denies,omitempty"`
	// Skills are names of loaded skills whose tools' scopes the process may
	// execute.
	Skills []string `json:"skills,omitempty"`
	// Budget lowers the image's limits (0 fields keep them).
	Budget *capabilities.Budget `json:"budget,omitempty"`
}

// SpawnResponse answers POST /processes.
type SpawnResponse struct {
	PID int64 `json:"pid"`
}

// maxGoalBytes bounds a goal (a request body is bounded too).
const maxGoalBytes = 256 << 10

func (s *Server) spawn(w http.ResponseWriter, r *http.Request) {
	var req SpawnRequest
	if e := s.decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	spec, e := s.spawnSpec(req)
	if e != nil {
		writeError(w, e)
		return
	}
	pid, err := s.rt.Spawn(spec)
	if err != nil {
		writeError(w, kernelError(err))
		return
	}
	s.kick()
	w.Header().Set("Location", fmt.Sprintf("%s/processes/%d", APIPrefix, pid))
	writeJSON(w, http.StatusCreated, SpawnResponse{PID: pid})
}

// spawnSpec checks a spawn request and builds the root's grants as run
// does: the clock, the grants and asks, the denies last.
func (s *Server) spawnSpec(req SpawnRequest) (kernel.SpawnSpec, *apiError) {
	switch {
	case strings.TrimSpace(req.Image) == "":
		return kernel.SpawnSpec{}, errInvalid("image: required (for example base:v0)")
	case strings.TrimSpace(req.Goal) == "":
		return kernel.SpawnSpec{}, errInvalid("goal: required")
	case len(req.Goal) > maxGoalBytes:
		return kernel.SpawnSpec{}, errInvalid("goal: %d bytes, more than %d", len(req.Goal), maxGoalBytes)
	case !utf8.ValidString(req.Goal):
		return kernel.SpawnSpec{}, errInvalid("goal: must be UTF-8")
	}
	now := s.opts.Now()
	grants := []capabilities.Grant{
		{ID: "api-clock-now", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
		{ID: "api-clock-sleep", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
	}
	parse := func(field string, specs []string, effect capabilities.Effect) *apiError {
		for i, spec := range specs {
			g, err := capabilities.ParseGrantSpec(fmt.Sprintf("api-%s-%d", field, i+1), spec, effect, now)
			if err != nil {
				return errInvalid("%s[%d]: %v", field, i, err)
			}
			grants = append(grants, g)
		}
		return nil
	}
	if e := parse("grants", req.Grants, capabilities.Allow); e != nil {
		return kernel.SpawnSpec{}, e
	}
	if e := parse("asks", req.Asks, capabilities.Ask); e != nil {
		return kernel.SpawnSpec{}, e
	}
	scopes, e := s.skillScopes(req.Skills)
	if e != nil {
		return kernel.SpawnSpec{}, e
	}
	for i, sc := range scopes {
		grants = append(grants, capabilities.Grant{ID: fmt.Sprintf("api-skills-%d", i+1), Resource: "scope:" + sc,
			Rights: []capabilities.Right{capabilities.Execute}, Effect: capabilities.Allow})
	}
	if e := parse("denies", req.Denies, capabilities.Deny); e != nil {
		return kernel.SpawnSpec{}, e
	}
	spec := kernel.SpawnSpec{Image: req.Image, Goal: req.Goal, Grants: grants}
	if req.Budget != nil {
		if err := req.Budget.Validate(); err != nil {
			return kernel.SpawnSpec{}, errInvalid("budget: %v", err)
		}
		spec.Budget = *req.Budget
	}
	return spec, nil
}

// skillScopes are the scopes the tools of the named skills own.
func (s *Server) skillScopes(names []string) ([]string, *apiError) {
	if len(names) == 0 {
		return nil, nil
	}
	if s.opts.Skills == nil {
		return nil, errInvalid("skills: no skill packages are loaded (start libos serve with --skills DIR)")
	}
	byName := map[string][]string{}
	var loaded []string
	for _, sk := range s.opts.Skills.Skills() {
		byName[sk.Name] = sk.Tools
		loaded = append(loaded, sk.Name)
	}
	owned := map[string][]string{}
	for _, t := range s.opts.Skills.Tools() {
		owned[t.Name] = t.Scopes
	}
	var scopes []string
	for i, name := range names {
		toolNames, ok := byName[name]
		if !ok {
			return nil, errInvalid("skills[%d]: no skill %q is loaded (loaded: %s)", i, name, strings.Join(loaded, ", "))
		}
		for _, t := range toolNames {
			for _, sc := range owned[t] {
				if !slices.Contains(scopes, sc) {
					scopes = append(scopes, sc)
				}
			}
		}
	}
	return scopes, nil
}

func (s *Server) inspect(w http.ResponseWriter, r *http.Request) {
	pid, e := pathPID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	b, err := s.detail(pid)
	if err != nil {
		writeError(w, kernelError(err))
		return
	}
	writeRaw(w, http.StatusOK, b)
}

func (s *Server) context(w http.ResponseWriter, r *http.Request) {
	pid, e := pathPID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	v, err := s.rt.ContextOf(pid)
	answer(w, http.StatusOK, v, err)
}

// queryBool parses an optional boolean query parameter.
func queryBool(r *http.Request, name string) (bool, *apiError) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errInvalid("%s %q: must be true or false", name, v)
	}
	return b, nil
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	pid, e := pathPID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	all, e := queryBool(r, "all")
	if e != nil {
		writeError(w, e)
		return
	}
	v, err := s.rt.Messages(pid, all)
	answer(w, http.StatusOK, v, err)
}

// MessageRequest is the body of POST /processes/{pid}/messages.
type MessageRequest struct {
	Body      string `json:"body"`
	From      string `json:"from,omitempty"`
	Subject   string `json:"subject,omitempty"`
	Interrupt bool   `json:"interrupt,omitempty"`
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) {
	var req MessageRequest
	if e := s.decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	info, e := s.existing(r)
	if e != nil {
		writeError(w, e)
		return
	}
	switch {
	case strings.TrimSpace(req.Body) == "":
		writeError(w, errInvalid("body: required"))
		return
	case len(req.From) > 200:
		writeError(w, errInvalid("from: at most 200 bytes"))
		return
	case info.Status.Terminal():
		writeError(w, errConflict("pid %d has ended (%s); its mailbox is closed", info.PID, info.Status))
		return
	}
	m, err := s.rt.PostHumanMessage(kernel.HumanMessage{To: info.PID, From: req.From, Body: req.Body, Subject: req.Subject, Interrupt: req.Interrupt})
	if err == nil {
		s.kick()
	}
	answer(w, http.StatusCreated, m, err)
}

// SignalRequest is the body of POST /processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal"`
}

func (s *Server) signal(w http.ResponseWriter, r *http.Request) {
	var req SignalRequest
	if e := s.decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	pid, e := pathPID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	switch req.Signal {
	case kernel.SignalKill, kernel.SignalPause, kernel.SignalContinue:
	case "":
		writeError(w, errInvalid("signal: required: kill, pause or continue"))
		return
	default:
		writeError(w, errInvalid("signal %q: must be kill, pause or continue", req.Signal))
		return
	}
	rep, err := s.rt.Signal(pid, req.Signal)
	if err == nil {
		// A pause of a running process is recorded without a log entry.
		for _, p := range rep.Processes {
			s.cache.forget(p.PID)
		}
		s.kick()
	}
	answer(w, http.StatusOK, rep, err)
}

func (s *Server) goal(w http.ResponseWriter, r *http.Request) {
	pid, e := pathPID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	v, err := s.rt.GoalOf(pid)
	answer(w, http.StatusOK, v, err)
}

// GoalRequest is the body of PUT /processes/{pid}/goal.
type GoalRequest struct {
	Goal string `json:"goal"`
}

// GoalSet answers PUT /processes/{pid}/goal: the goal Object's new version.
type GoalSet struct {
	PID     int64  `json:"pid"`
	OID     string `json:"oid"`
	Version uint64 `json:"version"`
}

func (s *Server) setGoal(w http.ResponseWriter, r *http.Request) {
	var req GoalRequest
	if e := s.decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	info, e := s.existing(r)
	if e != nil {
		writeError(w, e)
		return
	}
	switch {
	case strings.TrimSpace(req.Goal) == "":
		writeError(w, errInvalid("goal: required"))
		return
	case len(req.Goal) > maxGoalBytes:
		writeError(w, errInvalid("goal: %d bytes, more than %d", len(req.Goal), maxGoalBytes))
		return
	case info.Status.Terminal():
		writeError(w, errConflict("pid %d has ended (%s); its goal cannot change", info.PID, info.Status))
		return
	}
	meta, err := s.rt.SetGoal(info.PID, req.Goal)
	if err == nil {
		s.kick()
	}
	answer(w, http.StatusOK, GoalSet{PID: info.PID, OID: meta.OID, Version: meta.Version}, err)
}

func (s *Server) objectsOf(w http.ResponseWriter, r *http.Request) {
	pid, e := pathPID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	v, err := s.rt.ObjectsOf(pid)
	answer(w, http.StatusOK, v, err)
}

func (s *Server) object(w http.ResponseWriter, r *http.Request) {
	v, err := s.rt.ObjectByID(r.PathValue("oid"))
	answer(w, http.StatusOK, v, err)
}

func (s *Server) approvals(w http.ResponseWriter, r *http.Request) {
	list, err := s.approvalList()
	answer(w, http.StatusOK, list, err)
}

// DecisionRequest is the body of POST /approvals/{pid}/{call_id}.
type DecisionRequest struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
}

// Decision answers POST /approvals/{pid}/{call_id}.
type Decision struct {
	PID      int64  `json:"pid"`
	CallID   string `json:"call_id"`
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	var req DecisionRequest
	if e := s.decodeBody(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	pid, e := pathPID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	callID := r.PathValue("call_id")
	var err error
	var out Decision
	switch req.Decision {
	case "approve":
		if req.Reason != "" {
			writeError(w, errInvalid("reason: only a deny takes a reason"))
			return
		}
		err = s.rt.Approve(pid, callID)
		out = Decision{PID: pid, CallID: callID, Decision: "approved"}
	case "deny":
		err = s.rt.DenyApproval(pid, callID, req.Reason)
		out = Decision{PID: pid, CallID: callID, Decision: "denied", Reason: req.Reason}
	case "":
		writeError(w, errInvalid("decision: required: approve or deny"))
		return
	default:
		writeError(w, errInvalid("decision %q: must be approve or deny", req.Decision))
		return
	}
	if err == nil {
		s.kick()
	}
	answer(w, http.StatusOK, out, err)
}

func (s *Server) checkpoints(w http.ResponseWriter, r *http.Request) {
	var root int64
	if v := r.URL.Query().Get("pid"); v != "" {
		pid, err := strconv.ParseInt(v, 10, 64)
		if err != nil || pid <= 0 {
			writeError(w, errInvalid("pid %q: must be a positive integer", v))
			return
		}
		root = pid
	}
	list, err := s.rt.Checkpoints(root)
	if list == nil {
		list = []kernel.Checkpoint{}
	}
	answer(w, http.StatusOK, list, err)
}

func (s *Server) createCheckpoint(w http.ResponseWriter, r *http.Request) {
	if e := s.emptyBody(w, r); e != nil {
		writeError(w, e)
		return
	}
	pid, e := pathPID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	cp, err := s.rt.CreateCheckpoint(pid)
	answer(w, http.StatusCreated, cp, err)
}

func (s *Server) inspectCheckpoint(w http.ResponseWriter, r *http.Request) {
	cp, err := s.rt.InspectCheckpoint(r.PathValue("id"))
	answer(w, http.StatusOK, cp, err)
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	if e := s.emptyBody(w, r); e != nil {
		writeError(w, e)
		return
	}
	rep, err := s.rt.RestoreCheckpoint(r.PathValue("id"))
	if err == nil {
		s.kick()
	}
	answer(w, http.StatusOK, rep, err)
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	if e := s.emptyBody(w, r); e != nil {
		writeError(w, e)
		return
	}
	rep, err := s.rt.ForkCheckpoint(r.PathValue("id"))
	if err == nil {
		s.kick()
	}
	answer(w, http.StatusCreated, rep, err)
}

// emptyBody accepts no body, or an empty JSON object, for an action that
// takes no argument.
func (s *Server) emptyBody(w http.ResponseWriter, r *http.Request) *apiError {
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return nil
	}
	var none struct{}
	return s.decodeBody(w, r, &none)
}
