"""What an update is checked for before yrs sees it: the guard, the order a document's own history
implies, updates yrs parks as pending, and yrs's panics as Python sees them; and how it is
applied: whole (``applying``), or a big one cut into slices (``slicing``) that go in one at a
time, taking turns across rooms (``sliced_apply``).
"""
