import Foundation

/// A min-heap of (time, subscription) pairs: what the scheduler must look at next, without
/// scanning every subscription on each request. Entries go stale when a subscription
/// changes; the caller skips those whose time no longer matches.
struct DueQueue: Sendable {
    private var heap: [(date: Date, id: String)] = []

    var isEmpty: Bool { heap.isEmpty }
    var count: Int { heap.count }

    mutating func push(_ date: Date, _ id: String) {
        heap.append((date, id))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].date < heap[parent].date else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns the earliest entry due at or before `limit`.
    mutating func popDue(before limit: Date) -> (date: Date, id: String)? {
        guard let first = heap.first, first.date <= limit else { return nil }
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count, heap[left].date < heap[smallest].date { smallest = left }
            if right < heap.count, heap[right].date < heap[smallest].date { smallest = right }
            if smallest == parent { break }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
        return first
    }

    /// The earliest time anything is due.
    var next: Date? { heap.first?.date }
}
