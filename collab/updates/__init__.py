"""What an update is checked for before yrs sees it: the guard, the order a document's own history
implies, updates yrs parks as pending, and yrs's panics as Python sees them.
"""
