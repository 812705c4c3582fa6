# Sidekiq's side of bench/queue_limits.py: `ruby bench/queue_sidekiq.rb PORT N` pushes N no-op jobs with
# Sidekiq::Client.push_bulk, 1,000 a call (Sidekiq's own bulk producer), and prints the seconds
# the pushes took. The job class is the shared peers harness's (sidekiq_jobs.rb), so a Sidekiq
# process started with `-r sidekiq_jobs.rb` runs them.
require 'sidekiq'

Redis.silence_deprecations = true
port, n = ARGV[0], Integer(ARGV[1])
Sidekiq.configure_client { |c| c.redis = { url: "redis://127.0.0.1:#{port}/0" } }

class NoopJob
  include Sidekiq::Worker
  def perform(i); end
end

Sidekiq.redis { |r| r.ping } # connect before timing
args = (0...n).map { |i| [i] }
t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
args.each_slice(1_000) { |slice| Sidekiq::Client.push_bulk('class' => NoopJob, 'args' => slice) }
puts Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
