package localcluster

import "testing"

func TestStatusLine(t *testing.T) {
	for _, c := range []struct {
		v    StatusView
		want string
	}{
		{StatusView{Leader: "manager1", Term: 2}, "leader manager1 (term 2); all processes up"},
		{StatusView{}, "no leader"},
		{StatusView{Leader: "manager3", Term: 4, Down: []string{"manager1"}}, "leader manager3 (term 4); down: manager1"},
		{StatusView{Down: []string{"manager1", "manager2"}, NotReady: []string{"gate1"}}, "no leader; down: manager1, manager2; not ready: gate1"},
	} {
		if got := c.v.Line(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.v, got, c.want)
		}
	}
	a := StatusView{Leader: "manager1", Term: 2}
	if !a.Equal(StatusView{Leader: "manager1", Term: 2}) || a.Equal(StatusView{Leader: "manager1", Term: 3}) {
		t.Error("Equal does not follow the line")
	}
}
