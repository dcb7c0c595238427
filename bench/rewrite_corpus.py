"""The passages ``tether bench rewrites`` asks to have rewritten: 48 sentences of the kind
writers select in meeting notes, plans and messages, each holding facts a rewrite must keep
(numbers, dates, weekdays, names, negations, decisions), some written as hastily as the one in
issue 38 ("talk about many thing and decide ship it friday"). Plain data.
"""

from __future__ import annotations

PASSAGES: tuple[str, ...] = (
    # decisions and days, written in a hurry
    "Yesterday we talk about many thing and decide ship it friday.",
    "we meet with the client and agree to move the launch to next tuesday",
    "Team looked at the bug list and decided to drop the export feature for now.",
    "After long talk we choose the blue design and tell Maria to start on monday.",
    "The board approved the budget but said no new hires until June.",
    "We will not ship the beta before the security review is done.",
    "Sam said the servers are fine and we dont need to migrate this year.",
    "Nobody wanted the late slot, so the demo stays on Wednesday at 3pm.",
    # numbers
    "The venue holds 120 people and costs 4,500 euros for the whole day.",
    "We sold 37 tickets in the first week and need about 80 more to break even.",
    "The new laptop has 16 GB of memory and weighs only 1.2 kilograms.",
    "Please order five boxes of paper and two toner cartridges for the office.",
    "Response times went down from 900 ms to 250 ms after the cache change.",
    "The survey had 312 answers and 41 percent of people asked for dark mode.",
    "Our rent goes up by 6 percent in January, to 2,120 dollars a month.",
    "It took three weeks and twelve meetings to agree on the new logo.",
    # dates
    "The contract starts on 3 March and ends on 28 February next year.",
    "Invoices are due on 2026-12-06, and late ones cost an extra fee.",
    "Can we move the review from 12/6 to 19/6 because Priya is away?",
    "The conference runs from May 14 to May 16 in Lisbon.",
    "Tickets go on sale tomorrow at noon and the early price ends on Sunday.",
    "The last backup ran on 30 November, so anything newer may be lost.",
    "Our office closes on 24 December and opens again on 2 January.",
    "The grant report must reach the foundation by April 30 at the latest.",
    # names
    "Alice and Tom will lead the workshop, and Chen handles the slides.",
    "Ask Dr. Okafor whether the Nairobi lab can run the tests for us.",
    "The Berlin office uses Jira, but the team in Osaka prefers Trello.",
    "Give the keys to Mr. Jensen at the front desk before you leave.",
    "Fatima from Acme called to say the parts ship from Rotterdam next week.",
    "We invited Professor Lee, but she is in Toronto until the end of October.",
    "Send the draft to Lucia and copy Omar, since he signs the final version.",
    "The Riverside project moves to Hannah after Kim leaves in August.",
    # negations
    "Do not restart the database during business hours under any circumstances.",
    "The printer on the second floor never works, so use the one in room 210.",
    "We have no budget for travel this quarter, not even for the sales team.",
    "Without a signed form we cannot give anyone access to the archive.",
    "The app doesn't support offline mode yet, and none of the testers asked for it.",
    "Neither the mayor nor her deputy will attend the opening on Saturday.",
    "Guests may not park in the staff lot after 6pm.",
    "I haven't seen the final numbers, so don't quote them in the press release.",
    # decisions with clauses
    "If the vendor misses the deadline again, we cancel the order and buy from Nordic Supply.",
    "We postponed the release because two tests failed on the Windows build.",
    "The committee rejected the proposal, although three members voted for it.",
    "Once legal signs off, Ravi will publish the policy and email every customer.",
    "We keep the old pricing for current users but raise it for new ones in spring.",
    "The interns start on Monday, and each of them gets a mentor from the design team.",
    "When the pilot ends on 15 July, we decide whether to roll it out to all 9 stores.",
    "Lena fixed the login bug, tested it on Android and merged it before lunch.",
)
